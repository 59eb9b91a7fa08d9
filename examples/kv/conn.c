/* conn.c — a tcm-kv connection's buffers: the input it has read, the
 * replies it has not sent, and the socket they go out on. Unsent replies
 * over --output-limit close the connection; a connection stops being read
 * while 1 MiB of its replies wait (a pipelining client that reads slowly is
 * slowed, not dropped). The buffers are the worker's own (malloc), never
 * the shared heap: only the table lives there. */
#define _GNU_SOURCE
#include "worker.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tcm.h>

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

void out_raw(conn_t *c, const void *p, size_t n)
{
    if (out_reserve(c, n)) {
        memcpy(c->out + c->out_len, p, n);
        c->out_len += n;
    } else {
        c->closing = true; /* no memory for the reply: the client cannot be answered */
    }
}

void out_str(conn_t *c, const char *s)
{
    out_raw(c, s, strlen(s));
}

void out_ok(conn_t *c)
{
    out_raw(c, "+OK\r\n", 5);
}

void out_null(conn_t *c)
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

void out_int(conn_t *c, long long v)
{
    out_number(c, ':', v);
}

void out_array(conn_t *c, long long n)
{
    out_number(c, '*', n);
}

void out_bulk(conn_t *c, const char *p, size_t n)
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
void out_value(conn_t *c, const kv_entry_t *e)
{
    if (e)
        out_bulk(c, kv_cval(e), e->vlen);
    else
        out_null(c);
}

void out_err(conn_t *c, const char *fmt, ...)
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

const char *const ERR_INT = "ERR value is not an integer or out of range";
const char *const ERR_SYNTAX = "ERR syntax error";
const char *const ERR_OOM = "OOM command not allowed when used memory > 'maxmemory'.";

/* A write that found no memory: the heap is full, or tcmd is gone (then
 * no allocation can succeed, and the maxmemory text would mislead). */
void out_oom(conn_t *c)
{
    uint64_t v;
    if (tcm_stat("bytes_limit", &v) == -ENOTCONN)
        out_err(c, "ERR tcmd not running: the shared heap is unreachable");
    else
        out_err(c, "%s", ERR_OOM);
}

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

void conn_close(conn_t *c)
{
    if (uv_is_closing((uv_handle_t *)&c->tcp))
        return;
    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

void conn_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
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

static void on_write(uv_write_t *req, int status)
{
    conn_t *c = req->data;
    free(req);
    if (status < 0) {
        conn_close(c);
        return;
    }
    if (c->paused && !c->closing && uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) < KV_READ_PAUSE / 4) {
        c->paused = false;
        uv_read_start((uv_stream_t *)&c->tcp, conn_alloc_cb, conn_read_cb);
    }
}

typedef struct write_req {
    uv_write_t req;
    char data[];
} write_req_t;

/* Send what the replies so far came to; false if the connection is gone. */
bool flush_out(conn_t *c)
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

