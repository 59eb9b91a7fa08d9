/* worker.h — what the files of one tcm-kv worker share: the worker, its
 * connections and the replies (conn.c), the RESP2 parser (resp.c), the
 * commands (commands.c, debug.c) and the event loop (server.c). */
#ifndef KV_WORKER_H
#define KV_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "server.h"

#define KV_MAX_BULK (512ull << 20) /* one bulk string, as Redis's proto-max-bulk-len */
#define KV_READ_PAUSE (1u << 20)   /* stop reading a connection while this much of its replies wait */

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

/* ---- conn.c: replies, buffered until flush_out ---- */
void out_raw(conn_t *c, const void *p, size_t n);
void out_str(conn_t *c, const char *s);
void out_ok(conn_t *c);
void out_null(conn_t *c);
void out_int(conn_t *c, long long v);
void out_array(conn_t *c, long long n);
void out_bulk(conn_t *c, const char *p, size_t n);
void out_value(conn_t *c, const kv_entry_t *e); /* an entry's value, or the null bulk */
void out_err(conn_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void out_oom(conn_t *c);

extern const char *const ERR_INT;
extern const char *const ERR_SYNTAX;
extern const char *const ERR_OOM;

/* ---- conn.c: the connection's buffers and its socket ---- */
void conn_close(conn_t *c);
/* libuv's read buffer: room for the next 64 KiB at the end of c->in. */
void conn_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
/* Send what the replies so far came to; false if the connection is gone. */
bool flush_out(conn_t *c);

/* ---- resp.c: one command from c->in, resumable ---- */
typedef enum { PARSE_MORE, PARSE_DONE, PARSE_ERROR } parse_t;
parse_t resp_parse(conn_t *c);
/* An error reply, then the connection closes once it is sent. */
void protocol_error(conn_t *c, const char *what);

/* ---- commands.c ---- */
typedef struct cmd_ctx {
    worker_t *w;
    conn_t *c;
    kv_arg_t *a;
    unsigned n;
} cmd_ctx_t;

/* The parsed command in c->args, executed (its replies buffered in c). */
void kv_execute(worker_t *w, conn_t *c);
bool arg_is(const kv_arg_t *a, const char *s);
/* A decimal integer in the canonical form Redis stores. */
bool to_ll(const char *p, size_t n, long long *v);

#ifdef KV_TEST_HOOKS
/* ---- debug.c: the tests' hooks, in tcm-kv-test only ---- */
void cmd_debug(cmd_ctx_t *x);
#endif

/* ---- server.c: the event loop ---- */
/* libuv's read callback: buffer, parse and execute what arrived. */
void conn_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

#endif
