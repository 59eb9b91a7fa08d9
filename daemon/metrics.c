/* metrics.c — Prometheus text exposition at GET /metrics over plain HTTP,
 * on a loopback TCP port (anyone's: the page names no process) and on a
 * Unix socket (--metrics-socket: the operator's page has the clients'
 * pids). One request per connection, bounded request size, at most
 * TCM_METRICS_MAX_CONNS connections on each, each closed after
 * CONN_LIFETIME_NS; the figures come from the same snapshot as `tcmctl
 * stats`, rendered off the main loop at most once per PAGE_MAX_AGE_NS. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "holders.h"
#include "clientwatch.h"
#include "log.h"
#include "metrics.h"
#include "quota.h"
#include "rows.h"
#include "stats.h"
#include "views.h"

#define MAX_REQUEST 8192
/* A connection has this long to send its request and take its reply: a
 * scraper on loopback takes milliseconds; one that sends nothing, or
 * reads nothing, gives its place back. */
#define CONN_LIFETIME_NS (5000ull * 1000000ull)
/* GETs within this long of the last page rendered get that page again: a
 * flood of GETs costs one walk of the client caches per second, not one
 * per request (Prometheus scrapes every 15 s or so). */
#define PAGE_MAX_AGE_NS (1000ull * 1000000ull)

typedef struct tcm_http_conn {
    union {
        uv_tcp_t tcp;   /* --metrics-port */
        uv_pipe_t pipe; /* --metrics-socket */
        uv_stream_t stream;
    };
    bool on_socket;     /* came through the Unix socket */
    bool full;          /* the operator's: the page with pids */
    uint32_t uid;       /* (on_socket) its peer's */
    bool counted;       /* in srv->metrics_shares */
    tcm_server_t *srv;
    struct tcm_http_conn *next, *prev; /* srv->metrics_head */
    uint64_t opened_ns;
    char buf[MAX_REQUEST];
    size_t len;
    bool answered;
    bool closing;
    bool waiting;   /* for the page being rendered */
} http_conn_t;

typedef struct text {
    char *p;
    size_t len, cap;
} text_t;

static void put(text_t *t, const char *fmt, ...) TCM_PRINTF(2, 3);
static void put(text_t *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (t->p && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap ? t->cap * 2 : 16384) + (size_t)n;
        char *p = realloc(t->p, cap);
        if (!p)
            return;
        t->p = p;
        t->cap = cap;
    }
}

static void family(text_t *t, const char *name, const char *type, const char *help)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* bytes_free_x -> tcm_free_x_bytes; counters get _total. */
/* Prometheus wants base units: a figure in microseconds (name_us) is
 * name_seconds there; returns its scale (1e-6), else 0. */
static double metric_name(const tcm_stat_row_t *r, char *out, size_t len)
{
    size_t n = strlen(r->name);
    const char *total = r->counter && !(n > 6 && !strcmp(r->name + n - 6, "_total")) ? "_total" : "";
    if (strncmp(r->name, "bytes_", 6) == 0) {
        snprintf(out, len, "tcm_%.40s_bytes%s", r->name + 6, total);
    } else if (n > 3 && !strcmp(r->name + n - 3, "_us")) {
        snprintf(out, len, "tcm_%.*s_seconds%s", (int)(n - 3 < 40 ? n - 3 : 40), r->name, total);
        return 1e-6;
    } else {
        snprintf(out, len, "tcm_%.47s%s", r->name, total);
    }
    return 0;
}

/* One family per figure of a view, one sample per row, labelled by the
 * view's label fields. */
/* Labels named in hide are left out (the public page has no pids). */
static void render_view(text_t *t, const tcm_view_t *v, ProtobufCMessage *const *rows, size_t n, const char *hide)
{
    char name[96];
    for (size_t i = 0; i < v->nfields; i++) {
        const tcm_view_field_t *f = &v->fields[i];
        if (f->prom != TCM_PROM_GAUGE && f->prom != TCM_PROM_COUNTER)
            continue;
        snprintf(name, sizeof name, "%s%s%s", v->prom_prefix, f->prom_name, f->prom == TCM_PROM_COUNTER ? "_total" : "");
        family(t, name, f->prom == TCM_PROM_COUNTER ? "counter" : "gauge", f->help);
        for (size_t r = 0; r < n; r++) {
            put(t, "%s{", name);
            const char *sep = "";
            for (size_t l = 0; l < v->nfields; l++)
                if (v->fields[l].prom == TCM_PROM_LABEL && !(hide && strcmp(v->fields[l].prom_name, hide) == 0)) {
                    put(t, "%s%s=\"%llu\"", sep, v->fields[l].prom_name,
                        (unsigned long long)tcm__view_value(v, l, rows[r]));
                    sep = ",";
                }
            put(t, "} %llu\n", (unsigned long long)tcm__view_value(v, i, rows[r]));
        }
    }
}

static int by_exe(const void *a, const void *b)
{
    return strncmp(((const tcm_holder_row_t *)a)->e.exe, ((const tcm_holder_row_t *)b)->e.exe, TCM_EXE_MAX);
}

/* A label value from any bytes (a path, a process name): escaped, and
 * bytes that are not ASCII become '?'. out has room for 2 * max + 1. */
static void label_value(const char *in, size_t max, char *out)
{
    const unsigned char *from = (const unsigned char *)in;
    for (const unsigned char *c = from; *c && c < from + max; c++) {
        if (*c == '\\' || *c == '"' || *c == '\n') {
            *out++ = '\\';
            *out++ = *c == '\n' ? 'n' : (char)*c;
        } else {
            *out++ = *c >= 0x80 || *c < 0x20 ? '?' : (char)*c;
        }
    }
    *out = 0;
}

/* Each quota: its limit, what is held against it, its refusals. */
static void render_quotas(tcm_server_t *srv, text_t *t)
{
    enum { MAX_ROWS = 512 };
    tcm_quota_row_t *rows = malloc(MAX_ROWS * sizeof *rows);
    if (!rows)
        return;
    size_t n = tcm__quota_rows(srv, rows, MAX_ROWS);
    static const struct {
        const char *name, *type, *help;
    } fams[] = {
        {"tcm_quota_limit_bytes", "gauge", "heap bytes a user (name: its processes of that name) may hold; 0: none"},
        {"tcm_quota_held_bytes", "gauge", "heap bytes charged to the quota"},
        {"tcm_quota_refused_total", "counter", "requests refused because the quota was held"},
    };
    for (size_t f = 0; f < 3 && n; f++) {
        family(t, fams[f].name, fams[f].type, fams[f].help);
        for (size_t i = 0; i < n; i++) {
            char name[2 * sizeof rows[i].name + 1];
            label_value(rows[i].name, sizeof rows[i].name, name);
            uint64_t v = f == 0 ? rows[i].limit : f == 1 ? rows[i].held : rows[i].refused;
            put(t, "%s{uid=\"%u\",name=\"%s\"} %llu\n", fams[f].name, rows[i].uid, name, (unsigned long long)v);
        }
    }
    free(rows);
}

/* What departed clients left, summed per executable. */
static void render_departed(tcm_server_t *srv, text_t *t)
{
    tcm_holder_row_t *rows = malloc((TCM_HOLDERS + TCM_HOLDER_GROUPS) * sizeof *rows);
    if (!rows)
        return;
    size_t n = tcm__holders_rows(srv, rows);
    qsort(rows, n, sizeof *rows, by_exe);
    family(t, "tcm_departed_bytes", "gauge", "bytes departed clients left allocated, by executable");
    for (size_t i = 0; i < n;) {
        uint64_t bytes = 0;
        size_t j = i;
        for (; j < n && !strncmp(rows[j].e.exe, rows[i].e.exe, TCM_EXE_MAX); j++)
            bytes += rows[j].bytes;
        char exe[2 * TCM_EXE_MAX + 1];
        label_value(rows[i].e.exe, TCM_EXE_MAX, exe);
        put(t, "tcm_departed_bytes{exe=\"%s\"} %llu\n", exe, (unsigned long long)bytes);
        i = j;
    }
    free(rows);
}

/* Both pages at once, from one snapshot: the operator's (full) and the
 * one anyone who reaches the TCP port gets (pub: the clients without
 * their pids). */
static void render(tcm_server_t *srv, text_t *full, text_t *pub)
{
    text_t *t = full;
    tcm_stat_row_t rows[TCM_MAX_STAT_ROWS];
    size_t n = tcm__stats_snapshot(srv, rows, TCM_MAX_STAT_ROWS);
    char name[96];
    bool ops_done = false, refused_done = false;
    for (size_t i = 0; i < n; i++) {
        const tcm_stat_row_t *r = &rows[i];
        if (strcmp(r->name, "requests") == 0 || strcmp(r->name, "refused") == 0)
            continue; /* the labelled families below sum to these */
        if (strncmp(r->name, "requests_", 9) == 0) {
            if (!ops_done)
                family(t, "tcm_requests_total", "counter", "ring requests served, by operation");
            ops_done = true;
            put(t, "tcm_requests_total{op=\"%s\"} %llu\n", r->name + 9, (unsigned long long)r->value);
            continue;
        }
        if (strncmp(r->name, "refused_", 8) == 0) {
            if (!refused_done)
                family(t, "tcm_refused_total", "counter", "requests or objects refused, by reason");
            refused_done = true;
            put(t, "tcm_refused_total{reason=\"%s\"} %llu\n", r->name + 8, (unsigned long long)r->value);
            continue;
        }
        double scale = metric_name(r, name, sizeof name);
        family(t, name, r->counter ? "counter" : "gauge", r->help);
        if (scale)
            put(t, "%s %.6f\n", name, (double)r->value * scale);
        else if (r->is_float)
            put(t, "%s %.6f\n", name, r->fvalue);
        else
            put(t, "%s %llu\n", name, (unsigned long long)r->value);
    }

    family(t, "tcm_request_duration_seconds", "histogram", "ring request service time on the heap thread");
    uint64_t cum = 0;
    for (unsigned i = 0; i < TCM_LAT_BUCKETS; i++) {
        cum += atomic_load(&srv->dstats->latency[i]);
        double up = tcm__latency_upper_us(i);
        if (isinf(up))
            put(t, "tcm_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
        else
            put(t, "tcm_request_duration_seconds_bucket{le=\"%g\"} %llu\n", up / 1e6, (unsigned long long)cum);
    }
    put(t, "tcm_request_duration_seconds_sum %.9f\n", (double)atomic_load(&srv->dstats->latency_sum_ns) / 1e9);
    put(t, "tcm_request_duration_seconds_count %llu\n", (unsigned long long)cum);

    Tcm__ClassInfo *classes = calloc(TCM_NCLASSES, sizeof *classes);
    Tcm__ClientInfo *clients = calloc(srv->max_clients, sizeof *clients);
    ProtobufCMessage **rows_of = calloc(srv->max_clients > TCM_NCLASSES ? srv->max_clients : TCM_NCLASSES,
                                        sizeof *rows_of);
    if (classes && clients && rows_of) {
        size_t nrows = 0, ncls = tcm__classes_view(srv, classes);
        for (size_t i = 0; i < ncls; i++)
            if (classes[i].spans) /* the classes in use: the rest would be 58 lines of zeros */
                rows_of[nrows++] = &classes[i].base;
        render_view(t, &tcm__view_classes, rows_of, nrows, NULL);
        if (t->p) /* what the two pages share so far */
            put(pub, "%.*s", (int)t->len, t->p);
        size_t ncl = tcm__clients_view(srv, clients);
        for (size_t i = 0; i < ncl; i++)
            rows_of[i] = &clients[i].base;
        render_view(full, &tcm__view_clients, rows_of, ncl, NULL);
        render_view(pub, &tcm__view_clients, rows_of, ncl, "pid");
    }
    free(classes);
    free(clients);
    free(rows_of);
    text_t tail = {0};
    render_departed(srv, &tail);
    render_quotas(srv, &tail);
    family(&tail, "tcm_build_info", "gauge", "tcmd version");
    put(&tail, "tcm_build_info{version=\"%s\"} 1\n", TCM_VERSION_STRING);
    if (tail.p) {
        put(full, "%.*s", (int)tail.len, tail.p);
        put(pub, "%.*s", (int)tail.len, tail.p);
    }
    free(tail.p);
}

static void on_close(uv_handle_t *h)
{
    http_conn_t *c = h->data;
    if (c->on_socket) {
        c->srv->metrics_socket_conns--;
        if (c->counted)
            tcm__shares_drop(&c->srv->metrics_shares, c->uid);
    } else {
        c->srv->metrics_conns--;
    }
    free(c);
}

static void conn_close(http_conn_t *c)
{
    if (c->closing)
        return;
    c->closing = true;
    if (c->prev)
        c->prev->next = c->next;
    else
        c->srv->metrics_head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    uv_close((uv_handle_t *)&c->stream, on_close);
}

static void on_written(uv_write_t *req, int status)
{
    (void)status;
    http_conn_t *c = req->handle->data;
    free(req->data);
    free(req);
    conn_close(c);
}

static void respond(http_conn_t *c, const char *status, const char *ctype, const char *body, size_t blen)
{
    text_t t = {0};
    put(&t, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", status, ctype,
        blen);
    if (t.p && blen) {
        char *p = realloc(t.p, t.len + blen);
        if (p) {
            memcpy(p + t.len, body, blen);
            t.p = p;
            t.len += blen;
        }
    }
    uv_write_t *req = malloc(sizeof *req);
    if (!t.p || !req) {
        free(t.p);
        free(req);
        conn_close(c);
        return;
    }
    req->data = t.p;
    uv_buf_t b = uv_buf_init(t.p, (unsigned)t.len);
    c->answered = true;
    if (uv_write(req, &c->stream, &b, 1, on_written) != 0) {
        free(t.p);
        free(req);
        conn_close(c);
    }
}

static void respond_page(http_conn_t *c)
{
    tcm_server_t *srv = c->srv;
    const char *page = c->full ? srv->metrics_page_full : srv->metrics_page;
    size_t len = c->full ? srv->metrics_page_full_len : srv->metrics_page_len;
    respond(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", page ? page : "", page ? len : 0);
}

/* The page reads every client's caches (the clients view): rendered on
 * libuv's thread pool, as the control socket's views are (handlers.c), and
 * sent to every connection that waited for it. */
typedef struct render_job {
    uv_work_t work;
    tcm_server_t *srv;
    text_t t, pub; /* the operator's page, the public one */
    uint64_t ns;
} render_job_t;

static void render_work(uv_work_t *w)
{
    render_job_t *j = w->data;
    j->ns = tcm__now_ns();
    render(j->srv, &j->t, &j->pub);
}

static void render_done(uv_work_t *w, int status)
{
    render_job_t *j = w->data;
    tcm_server_t *srv = j->srv;
    tcm__view_end(srv, TCM_VIEW_METRICS);
    if (status == 0 && j->t.p && j->pub.p) {
        free(srv->metrics_page_full);
        free(srv->metrics_page);
        srv->metrics_page_full = j->t.p;
        srv->metrics_page_full_len = j->t.len;
        srv->metrics_page = j->pub.p;
        srv->metrics_page_len = j->pub.len;
        srv->metrics_page_ns = j->ns;
    } else {
        free(j->t.p);
        free(j->pub.p);
    }
    free(j);
    for (http_conn_t *c = srv->metrics_head, *next; c; c = next) {
        next = c->next;
        if (c->waiting && !c->answered && !c->closing) {
            c->waiting = false;
            respond_page(c);
        }
    }
}

static void queue_render(tcm_server_t *srv)
{
    if (!tcm__view_begin(srv, TCM_VIEW_METRICS))
        return; /* the page being rendered goes to this one too */
    render_job_t *j = calloc(1, sizeof *j);
    if (j) {
        j->srv = srv;
        j->work.data = j;
    }
    if (!j || uv_queue_work(srv->loop, &j->work, render_work, render_done) != 0) {
        free(j);
        tcm__view_end(srv, TCM_VIEW_METRICS);
        for (http_conn_t *c = srv->metrics_head, *next; c; c = next) {
            next = c->next;
            if (c->waiting && !c->answered && !c->closing) {
                static const char msg[] = "cannot render the page now\n";
                c->waiting = false;
                respond(c, "503 Service Unavailable", "text/plain", msg, sizeof msg - 1);
            }
        }
        return;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    http_conn_t *c = h->data;
    (void)suggested;
    *buf = uv_buf_init(c->buf + c->len, (unsigned)(MAX_REQUEST - 1 - c->len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    http_conn_t *c = s->data;
    (void)buf;
    if (c->answered || c->closing)
        return;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    c->len += (size_t)nread;
    c->buf[c->len] = 0;
    if (!strstr(c->buf, "\r\n\r\n") && !strstr(c->buf, "\n\n")) {
        if (c->len >= MAX_REQUEST - 1) {
            static const char msg[] = "request too large\n";
            respond(c, "431 Request Header Fields Too Large", "text/plain", msg, sizeof msg - 1);
        }
        return;
    }
    uv_read_stop(s);
    char method[8] = "", path[256] = "";
    if (sscanf(c->buf, "%7s %255s", method, path) != 2) {
        static const char msg[] = "bad request\n";
        respond(c, "400 Bad Request", "text/plain", msg, sizeof msg - 1);
    } else if (strcmp(method, "GET") != 0) {
        static const char msg[] = "only GET\n";
        respond(c, "405 Method Not Allowed", "text/plain", msg, sizeof msg - 1);
    } else if (strcmp(path, "/metrics") != 0) {
        static const char msg[] = "tcmd serves /metrics\n";
        respond(c, "404 Not Found", "text/plain", msg, sizeof msg - 1);
    } else {
        tcm_server_t *srv = c->srv;
        if (srv->metrics_page && tcm__now_ns() - srv->metrics_page_ns < PAGE_MAX_AGE_NS) {
            respond_page(c);
        } else {
            c->waiting = true;
            queue_render(srv);
        }
    }
}

/* One listener's new connection. The TCP port is anyone's on the box:
 * its page has no pids, and its connections share one pool. The Unix
 * socket is the control socket's kind (owner-only, the group's with
 * --allow-group): the operator (root, tcmd's user) gets the page with
 * pids, and its own pool, where each other user may hold a quarter and the
 * operator a reserve beyond the cap: a flood of the TCP port, or of another
 * user, never keeps the operator's scraper out. */
static void accept_conn(uv_stream_t *server, int status, bool on_socket)
{
    tcm_server_t *srv = server->data;
    if (status < 0) {
        tcm__log_peer(TCM_LOG_WARN, TCM_LOG_PEER_METRICS, "metrics: accept failed: %s", uv_strerror(status));
        return;
    }
    http_conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return;
    c->srv = srv;
    c->on_socket = on_socket;
    c->opened_ns = tcm__now_ns();
    if (on_socket)
        uv_pipe_init(srv->loop, &c->pipe, 0);
    else
        uv_tcp_init(srv->loop, &c->tcp);
    c->stream.data = c;
    (on_socket ? &srv->metrics_socket_conns : &srv->metrics_conns)[0]++;
    c->next = srv->metrics_head; /* listed first, so that conn_close can unlink it whatever happens next */
    if (c->next)
        c->next->prev = c;
    srv->metrics_head = c;
    if (uv_accept(server, &c->stream) != 0) {
        conn_close(c);
        return;
    }
    bool over = srv->metrics_conns > TCM_METRICS_MAX_CONNS;
    if (on_socket) {
        uv_os_fd_t fd;
        tcm_pid_t pid;
        tcm_gid_t gid;
        tcm_uid_t uid;
        if (uv_fileno((uv_handle_t *)&c->pipe, &fd) != 0 ||
            tcm__peer_cred((tcm_handle_t)(intptr_t)fd, &pid, &uid, &gid) != 0) {
            conn_close(c);
            return;
        }
        c->uid = (uint32_t)uid;
        c->full = tcm__is_operator(c->uid);
        over = c->full ? srv->metrics_socket_conns > TCM_METRICS_MAX_CONNS + TCM_CONTROL_OPERATOR_RESERVE
                       : srv->metrics_socket_conns > TCM_METRICS_MAX_CONNS ||
                             tcm__shares_of(&srv->metrics_shares, c->uid) >= TCM_METRICS_MAX_CONNS / 4;
        tcm__shares_add(&srv->metrics_shares, c->uid);
        c->counted = true;
    }
    if (over) { /* accepted only to be closed: refusing costs nothing more */
        tcm__log_peer(TCM_LOG_WARN, TCM_LOG_PEER_METRICS, "metrics: connection refused: %u open on the %s, the limit",
                      on_socket ? srv->metrics_socket_conns : srv->metrics_conns, on_socket ? "socket" : "port");
        conn_close(c);
        return;
    }
    uv_read_start(&c->stream, on_alloc, on_read);
}

static void on_connection(uv_stream_t *server, int status)
{
    accept_conn(server, status, false);
}

static void on_socket_connection(uv_stream_t *server, int status)
{
    accept_conn(server, status, true);
}

/* Every second: connections past their time (no whole request yet, or a
 * reply not taken) are closed. The list is oldest last. */
static void on_sweep(uv_timer_t *timer)
{
    tcm_server_t *srv = timer->data;
    uint64_t now = tcm__now_ns();
    unsigned closed = 0;
    for (http_conn_t *c = srv->metrics_head, *next; c; c = next) {
        next = c->next;
        if (now - c->opened_ns >= CONN_LIFETIME_NS) {
            conn_close(c);
            closed++;
        }
    }
    if (closed)
        tcm__log_peer(TCM_LOG_INFO, TCM_LOG_PEER_METRICS, "metrics: %u connections closed after %llu s without a "
                      "whole request or with their reply not taken", closed,
                      (unsigned long long)(CONN_LIFETIME_NS / 1000000000ull));
}

int tcm__metrics_start(tcm_server_t *srv)
{
    struct sockaddr_storage sa;
    int err = uv_ip4_addr(srv->metrics_addr, srv->metrics_port, (struct sockaddr_in *)&sa);
    if (err)
        err = uv_ip6_addr(srv->metrics_addr, srv->metrics_port, (struct sockaddr_in6 *)&sa);
    if (err) {
        tcm__log(TCM_LOG_ERROR, "metrics: bad address '%s'", srv->metrics_addr);
        return err;
    }
    uv_tcp_init(srv->loop, &srv->metrics);
    srv->metrics.data = srv;
    if ((err = uv_tcp_bind(&srv->metrics, (const struct sockaddr *)&sa, 0)) != 0 ||
        (err = uv_listen((uv_stream_t *)&srv->metrics, 64, on_connection)) != 0) {
        tcm__log(TCM_LOG_ERROR, "metrics: listen(%s:%d) failed: %s", srv->metrics_addr, srv->metrics_port,
                 uv_strerror(err));
        return err;
    }
    tcm__log(TCM_LOG_INFO, "metrics: http://%s:%d/metrics (pids only on --metrics-socket)", srv->metrics_addr,
             srv->metrics_port);
    return 0;
}

/* The Unix socket, bound as the control socket is (owner-only, or the
 * group's with --allow-group; never replacing anything but a socket). */
static int socket_start(tcm_server_t *srv)
{
    char tmp[sizeof srv->metrics_socket + 16];
    int err = tcm__socket_bind_name(srv->metrics_socket, tmp, sizeof tmp);
    if (err) {
        tcm__log(TCM_LOG_ERROR, "metrics: socket %s: %s", srv->metrics_socket, strerror(-err));
        return err;
    }
    uv_pipe_init(srv->loop, &srv->metrics_pipe, 0);
    srv->metrics_pipe.data = srv;
    unsigned old = tcm__umask(0077);
    err = uv_pipe_bind(&srv->metrics_pipe, tmp);
    tcm__umask(old);
    if (!err)
        err = uv_listen((uv_stream_t *)&srv->metrics_pipe, 64, on_socket_connection);
    if (err) {
        tcm__log(TCM_LOG_ERROR, "metrics: listen(%s) failed: %s", tmp, uv_strerror(err));
        return err;
    }
    if ((srv->allow_group_set && (err = tcm__path_share(tmp, srv->allow_group, 0660)) != 0) ||
        (err = tcm__socket_publish(tmp, srv->metrics_socket)) != 0) {
        tcm__log(TCM_LOG_ERROR, "metrics: %s: %s", srv->metrics_socket, strerror(-err));
        return err;
    }
    tcm__log(TCM_LOG_INFO, "metrics: GET /metrics on %s", srv->metrics_socket);
    return 0;
}

int tcm__metrics_socket_start(tcm_server_t *srv)
{
    int err = tcm__shares_init(&srv->metrics_shares, 4 * TCM_METRICS_MAX_CONNS);
    if (err)
        return err;
    if ((err = srv->metrics_socket[0] ? socket_start(srv) : 0) != 0)
        return err;
    uv_timer_init(srv->loop, &srv->metrics_sweep);
    srv->metrics_sweep.data = srv;
    uv_timer_start(&srv->metrics_sweep, on_sweep, 1000, 1000);
    return 0;
}

void tcm__metrics_close(tcm_server_t *srv)
{
    while (srv->metrics_head)
        conn_close(srv->metrics_head); /* (unlinks it) */
}
