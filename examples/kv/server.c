/* server.c — a tcm-kv worker: connections, the RESP2 parser, replies and
 * the commands. Everything a client sends is bounded before it is
 * buffered: a bulk length over 512 MiB or over --query-limit, a command
 * whose bytes pass --query-limit, more than 1M arguments, an inline line
 * over 64 KiB or a non-number where a length goes is a protocol error
 * (reply, then close); unsent replies over --output-limit close the
 * connection; a connection stops being read while 1 MiB of its replies
 * wait (a pipelining client that reads slowly is slowed, not dropped);
 * past --maxclients connections (all workers together) a new one gets an
 * error and is closed. */
#define _GNU_SOURCE
#include "server.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "tcm.h"
#include "tcm_version.h"

#define MAX_BULK (512ull << 20)
#define MAX_ARGS (1u << 20)
#define MAX_INLINE (64u << 10)
#define READ_PAUSE (1u << 20)
#define SWEEP_MS 100
#define SWEEP_STRIPES 64
#define EVICT_MAX 1000 /* entries one write may evict to fit */

typedef struct kv_arg {
    const char *p;
    size_t n;
} kv_arg_t;

typedef struct worker worker_t;

typedef struct conn {
    uv_tcp_t tcp;
    worker_t *w;
    char *in;
    size_t in_len, in_cap;
    size_t cmd; /* start of the command being parsed */
    size_t pos; /* parse position */
    size_t need; /* parse again once in_len reaches this */
    long long want_args; /* -1: between commands */
    struct {
        size_t off, n;
    } *args;
    uint32_t nargs, args_cap;
    char *out;
    size_t out_len, out_cap;
    bool closing, quit, paused;
} conn_t;

struct worker {
    const kv_options_t *o;
    kv_shared_t *sh;
    kv_table_t *t;
    kv_worker_stats_t *stats;
    int index;
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_timer_t tick;
    uv_signal_t sigterm;
    _Atomic int *stop_flag;
    uint64_t seed;
    kv_arg_t *argv;
    uint32_t argv_cap;
    uint64_t open; /* connections of this worker, refused ones until they are closed */
};

/* ---- replies ---- */

static bool out_reserve(conn_t *c, size_t more)
{
    if (c->out_len + more <= c->out_cap)
        return true;
    if (c->out_len + more > c->w->o->output_limit) { /* one command's replies (a big MGET) count too */
        if (!c->closing)
            fprintf(stderr, "tcm-kv: closing a client whose unsent replies passed %" PRIu64 " bytes\n",
                    c->w->o->output_limit);
        return false;
    }
    size_t cap = c->out_cap ? c->out_cap : 4096;
    while (cap < c->out_len + more)
        cap *= 2;
    char *grown = realloc(c->out, cap);
    if (!grown)
        return false;
    c->out = grown;
    c->out_cap = cap;
    return true;
}

static void out_raw(conn_t *c, const void *p, size_t n)
{
    if (out_reserve(c, n)) {
        memcpy(c->out + c->out_len, p, n);
        c->out_len += n;
    } else {
        c->closing = true; /* no memory for the reply: the client cannot be answered */
    }
}

static void out_str(conn_t *c, const char *s)
{
    out_raw(c, s, strlen(s));
}

static void out_ok(conn_t *c)
{
    out_raw(c, "+OK\r\n", 5);
}

static void out_null(conn_t *c)
{
    out_raw(c, "$-1\r\n", 5);
}

/* ":123\r\n", "$5\r\n", "*2\r\n": the type byte, the number, CRLF (every
 * reply has one: no printf on the way) */
static void out_number(conn_t *c, char type, long long v)
{
    char buf[24], *p = buf + sizeof buf;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    *--p = '\n';
    *--p = '\r';
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--p = '-';
    *--p = type;
    out_raw(c, p, (size_t)(buf + sizeof buf - p));
}

static void out_int(conn_t *c, long long v)
{
    out_number(c, ':', v);
}

static void out_array(conn_t *c, long long n)
{
    out_number(c, '*', n);
}

static void out_bulk(conn_t *c, const char *p, size_t n)
{
    if (!out_reserve(c, n + 24)) {
        c->closing = true;
        return;
    }
    out_number(c, '$', (long long)n);
    memcpy(c->out + c->out_len, p, n);
    memcpy(c->out + c->out_len + n, "\r\n", 2);
    c->out_len += n + 2;
}

/* An entry's value, or the null bulk. */
static void out_value(conn_t *c, const kv_entry_t *e)
{
    if (e)
        out_bulk(c, kv_cval(e), e->vlen);
    else
        out_null(c);
}

static void out_err(conn_t *c, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    for (int i = 0; i < n && i < (int)sizeof buf; i++) /* one line, whatever the client sent */
        if (buf[i] == '\r' || buf[i] == '\n')
            buf[i] = ' ';
    out_raw(c, "-", 1);
    out_raw(c, buf, n < (int)sizeof buf ? (size_t)n : sizeof buf - 1);
    out_raw(c, "\r\n", 2);
}

static const char *const ERR_INT = "ERR value is not an integer or out of range";
static const char *const ERR_SYNTAX = "ERR syntax error";
static const char *const ERR_OOM = "OOM command not allowed when used memory > 'maxmemory'.";

/* ---- connections ---- */

static void on_close(uv_handle_t *h)
{
    conn_t *c = h->data;
    atomic_fetch_sub(&c->w->stats->connected, 1);
    c->w->open--;
    free(c->in);
    free(c->args);
    free(c->out);
    free(c);
}

static void conn_close(conn_t *c)
{
    if (uv_is_closing((uv_handle_t *)&c->tcp))
        return;
    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    conn_t *c = h->data;
    /* room for the next 64 KiB; a long bulk grows the buffer by doubling as
     * its bytes arrive, not by what its length says (which the client
     * chose) */
    size_t want = c->in_len + (64u << 10);
    if (want > c->in_cap) {
        size_t cap = c->in_cap ? c->in_cap : (64u << 10);
        while (cap < want)
            cap *= 2;
        char *grown = realloc(c->in, cap);
        if (!grown) {
            *buf = uv_buf_init(NULL, 0); /* UV_ENOBUFS: the read fails, the connection closes */
            return;
        }
        c->in = grown;
        c->in_cap = cap;
    }
    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_write(uv_write_t *req, int status)
{
    conn_t *c = req->data;
    free(req);
    if (status < 0) {
        conn_close(c);
        return;
    }
    if (c->paused && !c->closing && uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) < READ_PAUSE / 4) {
        c->paused = false;
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    }
}

typedef struct write_req {
    uv_write_t req;
    char data[];
} write_req_t;

/* Send what the replies so far came to; false if the connection is gone. */
static bool flush_out(conn_t *c)
{
    if (!c->out_len || uv_is_closing((uv_handle_t *)&c->tcp))
        return !uv_is_closing((uv_handle_t *)&c->tcp);
    uv_buf_t b = uv_buf_init(c->out, (unsigned)c->out_len);
    size_t sent = 0;
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) == 0) {
        int r = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (r > 0)
            sent = (size_t)r;
        else if (r != UV_EAGAIN && r != UV_ENOSYS) {
            conn_close(c);
            return false;
        }
    }
    size_t left = c->out_len - sent;
    c->out_len = 0;
    if (!left)
        return true;
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) + left > c->w->o->output_limit) {
        if (!c->closing) /* out_reserve said so already */
            fprintf(stderr, "tcm-kv: closing a client whose unsent replies passed %" PRIu64 " bytes\n",
                c->w->o->output_limit);
        conn_close(c);
        return false;
    }
    write_req_t *wr = malloc(sizeof *wr + left);
    if (!wr) {
        conn_close(c);
        return false;
    }
    memcpy(wr->data, c->out + sent, left);
    wr->req.data = c;
    b = uv_buf_init(wr->data, (unsigned)left);
    if (uv_write(&wr->req, (uv_stream_t *)&c->tcp, &b, 1, (uv_write_cb)on_write) != 0) {
        free(wr);
        conn_close(c);
        return false;
    }
    if (c->out_cap > (1u << 20)) { /* one big reply does not pin its buffer */
        free(c->out);
        c->out = NULL;
        c->out_cap = 0;
    }
    return true;
}

/* ---- the parser ---- */

typedef enum { PARSE_MORE, PARSE_DONE, PARSE_ERROR } parse_t;

static void protocol_error(conn_t *c, const char *what)
{
    out_err(c, "ERR Protocol error: %s", what);
    c->quit = true;
}

/* A decimal line starting at p (digits, a leading '-' allowed, at most 18
 * of them), ending in CRLF before end. Returns the position after CRLF, or
 * NULL: incomplete, or *bad on anything else. */
static const char *read_number(const char *p, const char *end, long long *v, bool *bad)
{
    const char *q = p + (p < end && *p == '-'), *digits = q;
    unsigned long long x = 0;
    for (; q < end && (unsigned)(*q - '0') < 10; q++) {
        if (q - digits == 18) {
            *bad = true;
            return NULL;
        }
        x = x * 10 + (unsigned)(*q - '0');
    }
    if (q + 1 >= end) /* the digits or the CRLF still to come */
        return NULL;
    if (q == digits || q[0] != '\r' || q[1] != '\n') {
        *bad = true;
        return NULL;
    }
    *v = *p == '-' ? -(long long)x : (long long)x;
    return q + 2;
}

static bool add_arg(conn_t *c, size_t off, size_t n)
{
    if (c->nargs == c->args_cap) {
        uint32_t cap = c->args_cap ? c->args_cap * 2 : 8;
        void *grown = realloc(c->args, cap * sizeof *c->args);
        if (!grown)
            return false;
        c->args = grown;
        c->args_cap = cap;
    }
    c->args[c->nargs].off = off;
    c->args[c->nargs].n = n;
    c->nargs++;
    return true;
}

static parse_t parse_inline(conn_t *c)
{
    const char *base = c->in, *p = base + c->pos, *end = base + c->in_len;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) {
        if (end - p > MAX_INLINE) {
            protocol_error(c, "too big inline request");
            return PARSE_ERROR;
        }
        return PARSE_MORE;
    }
    const char *lend = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
    c->nargs = 0;
    for (const char *q = p; q < lend;) {
        while (q < lend && (*q == ' ' || *q == '\t'))
            q++;
        const char *a = q;
        while (q < lend && *q != ' ' && *q != '\t')
            q++;
        if (q > a && !add_arg(c, (size_t)(a - base), (size_t)(q - a))) {
            c->closing = true;
            return PARSE_ERROR;
        }
    }
    c->pos = (size_t)(nl + 1 - base);
    return PARSE_DONE;
}

/* One command from the input, resumable: what is parsed so far is kept. */
static parse_t parse(conn_t *c)
{
    if (c->want_args < 0) {
        if (c->pos >= c->in_len)
            return PARSE_MORE;
        if (c->in[c->pos] != '*')
            return parse_inline(c);
        bool bad = false;
        long long n;
        const char *next = read_number(c->in + c->pos + 1, c->in + c->in_len, &n, &bad);
        if (!next) {
            if (bad)
                protocol_error(c, "invalid multibulk length");
            return bad ? PARSE_ERROR : PARSE_MORE;
        }
        if (n > MAX_ARGS) {
            protocol_error(c, "invalid multibulk length");
            return PARSE_ERROR;
        }
        c->pos = (size_t)(next - c->in);
        c->nargs = 0;
        c->want_args = n < 0 ? 0 : n;
    }
    while (c->nargs < c->want_args) {
        if (c->in_len < c->need)
            return PARSE_MORE;
        const char *p = c->in + c->pos, *end = c->in + c->in_len;
        if (p >= end)
            return PARSE_MORE;
        if (*p != '$') {
            out_err(c, "ERR Protocol error: expected '$', got '%c'", isprint((unsigned char)*p) ? *p : '?');
            c->quit = true;
            return PARSE_ERROR;
        }
        bool bad = false;
        long long n;
        const char *data = read_number(p + 1, end, &n, &bad);
        if (!data) {
            if (bad)
                protocol_error(c, "invalid bulk length");
            return bad ? PARSE_ERROR : PARSE_MORE;
        }
        if (n < 0 || (unsigned long long)n > MAX_BULK || (unsigned long long)n > c->w->o->query_limit) {
            protocol_error(c, "invalid bulk length");
            return PARSE_ERROR;
        }
        size_t at = (size_t)(data - c->in);
        if (at + (size_t)n + 2 > c->in_len) {
            c->need = at + (size_t)n + 2;
            return PARSE_MORE;
        }
        if (c->in[at + n] != '\r' || c->in[at + n + 1] != '\n') {
            protocol_error(c, "bulk not followed by CRLF");
            return PARSE_ERROR;
        }
        if (!add_arg(c, at, (size_t)n)) {
            c->closing = true;
            return PARSE_ERROR;
        }
        c->pos = at + (size_t)n + 2;
        c->need = 0;
    }
    c->want_args = -1;
    return PARSE_DONE;
}

/* ---- commands ---- */

typedef struct cmd_ctx {
    worker_t *w;
    conn_t *c;
    kv_arg_t *a;
    unsigned n;
} cmd_ctx_t;

typedef void (*cmd_fn)(cmd_ctx_t *x);

static bool arg_is(const kv_arg_t *a, const char *s)
{
    return a->n == strlen(s) && strncasecmp(a->p, s, a->n) == 0;
}

static bool to_ll(const char *p, size_t n, long long *v)
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
            out_err(x->c, "%s", ERR_OOM);
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
            out_err(x->c, "%s", ERR_OOM);
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
        out_err(x->c, "%s", ERR_OOM);
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
    if (have + x->a[2].n > MAX_BULK) {
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
        out_err(x->c, "%s", ERR_OOM);
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
            out_err(x->c, "%s", ERR_OOM);
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
        out_err(x->c, "%s", ERR_OOM);
        return;
    }
    if (SECTION("server"))
        fprintf(f,
                "# Server\r\nredis_version:7.0.0\r\ntcm_kv_version:" TCM_VERSION_STRING "\r\nredis_mode:standalone\r\n"
                "process_id:%d\r\nworker_index:%d\r\nworkers:%" PRIu64 "\r\nworker_restarts:%" PRIu64 "\r\n"
                "tcp_port:%d\r\nuptime_in_seconds:%" PRId64 "\r\nallocator:%s\r\n\r\n",
                (int)getpid(), w->index, workers, atomic_load(&sh->worker_restarts), w->o->port,
                (kv_now_ms() - sh->started_ms) / 1000, w->o->alloc);
    if (SECTION("clients"))
        fprintf(f, "# Clients\r\nconnected_clients:%" PRIu64 "\r\n\r\n", connected);
    if (SECTION("memory")) {
        fprintf(f, "# Memory\r\nused_memory:%" PRIu64 "\r\nmaxmemory:%" PRIu64 "\r\nmaxmemory_policy:allkeys-lru\r\n",
                kv_table_bytes(w->t), w->o->maxmemory);
        if (!strcmp(w->o->alloc, "tcm")) {
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

/* DEBUG HOLD key ms: hold the key's stripe locked for ms (a worker to kill
 * while it holds a lock); DEBUG CRASH point: die at that point of the next
 * change (see kv_crash_at). Only with --enable-debug-command. */
static void cmd_debug(cmd_ctx_t *x)
{
    if (!x->w->o->debug) {
        out_err(x->c, "ERR DEBUG command not allowed: start tcm-kv with --enable-debug-command");
        return;
    }
    static char point[32];
    long long ms;
    if (arg_is(&x->a[1], "HOLD") && x->n == 4 && to_ll(x->a[3].p, x->a[3].n, &ms) && ms >= 0 && ms <= 60000) {
        uint64_t h = kv_hash(x->a[2].p, x->a[2].n);
        kv_stripe_t *s = kv_lock(x->w->t, h);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
        kv_unlock(s);
        out_ok(x->c);
    } else if (arg_is(&x->a[1], "CRASH") && x->n == 3 && x->a[2].n < sizeof point) {
        memcpy(point, x->a[2].p, x->a[2].n);
        point[x->a[2].n] = 0;
        atomic_store(&kv_crash_at, point);
        out_ok(x->c);
    } else {
        out_err(x->c, "%s", ERR_SYNTAX);
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
    {"debug", -2, cmd_debug},
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

static void execute(worker_t *w, conn_t *c)
{
    unsigned n = c->nargs;
    if (n == 0)
        return;
    if (n > w->argv_cap) {
        kv_arg_t *grown = realloc(w->argv, n * sizeof *grown);
        if (!grown) {
            out_err(c, "%s", ERR_OOM);
            return;
        }
        w->argv = grown;
        w->argv_cap = n;
    }
    for (unsigned i = 0; i < n; i++)
        w->argv[i] = (kv_arg_t){c->in + c->args[i].off, c->args[i].n};
    cmd_ctx_t x = {w, c, w->argv, n};
    atomic_store_explicit(&w->stats->commands, atomic_load_explicit(&w->stats->commands, memory_order_relaxed) + 1,
                          memory_order_relaxed); /* only this worker writes its slot */
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

/* Every whole command in the input, executed in order (pipelining). */
static void process(conn_t *c)
{
    worker_t *w = c->w;
    while (!c->quit && !c->closing) {
        parse_t r = parse(c);
        if (r == PARSE_MORE)
            break;
        if (r == PARSE_DONE)
            execute(w, c);
        c->cmd = c->pos;
        if (c->out_len > (256u << 10) && !flush_out(c))
            return;
    }
    if (c->cmd) { /* keep only the command being received */
        memmove(c->in, c->in + c->cmd, c->in_len - c->cmd);
        c->in_len -= c->cmd;
        c->pos -= c->cmd;
        for (uint32_t i = 0; i < c->nargs && c->want_args >= 0; i++)
            c->args[i].off -= c->cmd;
        if (c->need)
            c->need -= c->cmd;
        c->cmd = 0;
    }
    if (c->in_cap > (1u << 20) && c->in_len < (64u << 10)) { /* a big command is done: give its room back */
        char *small = realloc(c->in, 64u << 10);
        if (small) {
            c->in = small;
            c->in_cap = 64u << 10;
        }
    }
    if (!flush_out(c))
        return;
    if (c->quit || c->closing) {
        conn_close(c);
        return;
    }
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > READ_PAUSE) {
        c->paused = true;
        uv_read_stop((uv_stream_t *)&c->tcp);
    }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    conn_t *c = s->data;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    c->in_len += (size_t)nread;
    if (c->in_len - c->cmd > c->w->o->query_limit) {
        fprintf(stderr, "tcm-kv: closing a client whose command passed the query limit (%" PRIu64 " bytes)\n",
                c->w->o->query_limit);
        protocol_error(c, "query buffer limit reached");
        flush_out(c);
        conn_close(c);
        return;
    }
    process(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    worker_t *w = server->data;
    if (status < 0)
        return;
    conn_t *c = calloc(1, sizeof *c);
    if (!c || uv_tcp_init(&w->loop, &c->tcp) != 0) {
        free(c);
        atomic_fetch_add(&w->stats->rejected, 1);
        return;
    }
    c->w = w;
    c->want_args = -1;
    c->tcp.data = c;
    atomic_fetch_add(&w->stats->connected, 1);
    w->open++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) { /* another worker took it */
        conn_close(c);
        return;
    }
    /* Each worker takes its share of --maxclients: counted here, not in the
     * shared root, so that the cap holds exactly whatever other workers (or
     * another tcm-kv on the same heap) do. */
    uint64_t share = (w->o->maxclients + (uint64_t)w->o->workers - 1) / (uint64_t)w->o->workers;
    if (w->open > share) {
        static const char msg[] = "-ERR max number of clients reached\r\n";
        uv_buf_t b = uv_buf_init((char *)msg, sizeof msg - 1);
        (void)uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        atomic_fetch_add(&w->stats->rejected, 1);
        conn_close(c);
        return;
    }
    atomic_fetch_add(&w->stats->connections, 1);
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void on_tick(uv_timer_t *t)
{
    worker_t *w = t->data;
    kv_sweep(w->t, SWEEP_STRIPES);
    if (w->stop_flag && atomic_load(w->stop_flag))
        uv_stop(&w->loop);
}

static void on_sigterm(uv_signal_t *s, int signum)
{
    (void)signum;
    uv_stop(s->loop);
}

static void close_all(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (uv_is_closing(h))
        return;
    if (h->type == UV_TCP && h->data && h->data != arg)
        conn_close(h->data);
    else
        uv_close(h, NULL);
}

int kv_worker_run(const kv_options_t *o, kv_shared_t *sh, int index, int listen_fd, _Atomic int *stop_flag)
{
    worker_t *w = calloc(1, sizeof *w);
    if (!w)
        return 1;
    w->o = o;
    w->sh = sh;
    w->t = sh->table;
    w->index = index;
    w->stats = &sh->workers[index];
    w->stop_flag = stop_flag;
    w->seed = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)kv_now_ms();
    atomic_store(&w->stats->connected, 0);
    uv_loop_init(&w->loop);
    uv_tcp_init(&w->loop, &w->listener);
    w->listener.data = w;
    int r = uv_tcp_open(&w->listener, listen_fd);
    if (r == 0)
        r = uv_listen((uv_stream_t *)&w->listener, 511, on_connection);
    if (r != 0) {
        fprintf(stderr, "tcm-kv: worker %d cannot listen: %s\n", index, uv_strerror(r));
        return 1;
    }
    uv_timer_init(&w->loop, &w->tick);
    w->tick.data = w;
    uv_timer_start(&w->tick, on_tick, SWEEP_MS, SWEEP_MS);
    if (!stop_flag) {
        uv_signal_init(&w->loop, &w->sigterm);
        uv_signal_start(&w->sigterm, on_sigterm, SIGTERM);
    }
    atomic_store(&w->stats->pid, (uint64_t)getpid()); /* counted in INFO's workers from here: it listens */
    uv_run(&w->loop, UV_RUN_DEFAULT);
    uv_walk(&w->loop, close_all, w);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    uv_loop_close(&w->loop);
    atomic_store(&w->stats->pid, 0);
    free(w->argv);
    free(w);
    return 0;
}
