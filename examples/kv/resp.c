/* resp.c — the RESP2 parser: one command at a time out of a connection's
 * input, resumable where the bytes stop. Everything a client sends is
 * bounded before it is buffered: a bulk length over 512 MiB or over
 * --query-limit, more than 1M arguments, an inline line over 64 KiB or a
 * non-number where a length goes is a protocol error (reply, then close). */
#include "worker.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS (1u << 20)
#define MAX_INLINE (64u << 10)

void protocol_error(conn_t *c, const char *what)
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
parse_t resp_parse(conn_t *c)
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
        if (n < 0 || (unsigned long long)n > KV_MAX_BULK || (unsigned long long)n > c->w->o->query_limit) {
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

