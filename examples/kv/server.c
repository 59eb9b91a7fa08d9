/* server.c — a tcm-kv worker's event loop: one libuv loop per worker,
 * accepting from the listening socket all workers share, reading each
 * connection into its buffers (conn.c), parsing (resp.c) and executing
 * (commands.c) every whole command that arrived, and sweeping expired keys
 * from a timer. A command whose bytes pass --query-limit closes its
 * connection; past --maxclients connections (all workers together) a new
 * one gets an error and is closed. */
#define _GNU_SOURCE
#include "worker.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SWEEP_MS 100
#define SWEEP_STRIPES 64

/* Every whole command in the input, executed in order (pipelining). */
static void process(conn_t *c)
{
    worker_t *w = c->w;
    while (!c->quit && !c->closing) {
        parse_t r = resp_parse(c);
        if (r == PARSE_MORE)
            break;
        if (r == PARSE_DONE)
            kv_execute(w, c);
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
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > KV_READ_PAUSE) {
        c->paused = true;
        uv_read_stop((uv_stream_t *)&c->tcp);
    }
}

void conn_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
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
    uv_read_start((uv_stream_t *)&c->tcp, conn_alloc_cb, conn_read_cb);
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
