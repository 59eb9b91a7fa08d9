/* control.c — the libuv control socket: attach handshake (Hello/Welcome),
 * ping, stats and clients, framed protobuf with bounded frames. A client's
 * connection stays open while it is attached; its EOF is how the daemon
 * learns the process is gone. Main thread only. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frame.h"
#include "log.h"
#include "prim.h"
#include "config.h"
#include "server.h"
#include "rows.h"
#include "stats.h"

struct tcm_conn {
    uv_pipe_t pipe;
    tcm_server_t *srv;
    tcm_client_t *client; /* set after Hello */
    uint8_t *buf;
    size_t len;
    pid_t pid;
    uid_t uid;
    gid_t gid;
    bool closing;
};

static void on_close(uv_handle_t *handle)
{
    tcm_conn_t *conn = handle->data;
    free(conn->buf);
    free(conn);
}

static void conn_close(tcm_conn_t *conn)
{
    if (conn->closing)
        return;
    conn->closing = true;
    if (conn->client) {
        tcm_client_rec_t *rec = conn->client->rec;
        tcm__log(TCM_LOG_DEBUG, "client %u (pid %u): control connection closed", rec->id, rec->pid);
        conn->client->conn = NULL;
        atomic_store_explicit(&rec->state, TCM_REC_DEAD, memory_order_release);
        tcm__heap_kick(conn->srv);
        conn->client = NULL;
    }
    uv_close((uv_handle_t *)&conn->pipe, on_close);
}

static void on_write(uv_write_t *req, int status)
{
    free(req->data);
    free(req);
    (void)status;
}

static void send_response(tcm_conn_t *conn, const Tcm__Response *resp)
{
    size_t len;
    uint8_t *buf = tcm__frame_pack(&resp->base, &len);
    uv_write_t *req = malloc(sizeof *req);
    if (!buf || !req) {
        free(buf);
        free(req);
        conn_close(conn);
        return;
    }
    req->data = buf;
    uv_buf_t b = uv_buf_init((char *)buf, (unsigned)len);
    if (uv_write(req, (uv_stream_t *)&conn->pipe, &b, 1, on_write) != 0) {
        free(buf);
        free(req);
        conn_close(conn);
    }
}

/* Answer with one body of the Response oneof (its members share storage). */
static void reply(tcm_conn_t *conn, Tcm__Response__BodyCase which, void *body)
{
    Tcm__Response resp = TCM__RESPONSE__INIT;
    resp.body_case = which;
    resp.welcome = body;
    send_response(conn, &resp);
}

/* The Welcome of a new client carries its segments as descriptors: the
 * heap read-write, the metadata read-only (a read-only open file
 * description cannot be mapped writable) and its own open file description
 * of its channel, already holding the liveness lock. Sent directly, not
 * through libuv's write queue, which cannot carry descriptors. */
static int reply_with_fds(tcm_conn_t *conn, Tcm__Response__BodyCase which, void *body, const int *fds, int nfds)
{
    Tcm__Response resp = TCM__RESPONSE__INIT;
    resp.body_case = which;
    resp.welcome = body;
    size_t len;
    uint8_t *buf = tcm__frame_pack(&resp.base, &len);
    uv_os_fd_t sock;
    int err = !buf ? -ENOMEM
              : uv_stream_get_write_queue_size((uv_stream_t *)&conn->pipe) || uv_fileno((uv_handle_t *)&conn->pipe, &sock)
                  ? -EBUSY
                  : tcm__send_with_fds(sock, buf, len, fds, nfds);
    free(buf);
    return err;
}

static bool refuse_access(tcm_conn_t *conn, const char *what);
static void send_error(tcm_conn_t *conn, uint32_t code, const char *msg)
{
    Tcm__Response resp = TCM__RESPONSE__INIT;
    Tcm__Error err = TCM__ERROR__INIT;
    err.code = code;
    err.message = (char *)msg;
    resp.body_case = TCM__RESPONSE__BODY_ERROR;
    resp.error = &err;
    send_response(conn, &resp);
}

/* Requests that change anything, and attaching (the segments are the
 * daemon user's), are for the daemon's own uid and root; anyone the socket
 * lets in may read. */
static bool allowed_to_change(tcm_conn_t *conn, const char *what)
{
    if (conn->uid == geteuid() || conn->uid == 0)
        return true;
    return refuse_access(conn, what);
}

/* Attaching is also for the members of --allow-group: the segments reach
 * them as descriptors, the metadata read-only. */
static bool allowed_to_attach(tcm_conn_t *conn)
{
    tcm_server_t *srv = conn->srv;
    uv_os_fd_t fd;
    if (conn->uid == geteuid() || conn->uid == 0 ||
        (srv->allow_group_set && uv_fileno((uv_handle_t *)&conn->pipe, &fd) == 0 &&
         tcm__peer_in_group(fd, conn->gid, srv->allow_group)))
        return true;
    return refuse_access(conn, "attaching");
}

static bool refuse_access(tcm_conn_t *conn, const char *what)
{
    char msg[160];
    snprintf(msg, sizeof msg, "permission denied: %s needs uid %u or root%s (you are uid %u)", what,
             (unsigned)geteuid(), strcmp(what, "attaching") == 0 && conn->srv->allow_group_set ? " or the allowed group" : "",
             (unsigned)conn->uid);
    tcm__log_limited(TCM_LOG_WARN, "control: pid %d uid %u refused: %s", (int)conn->pid, (unsigned)conn->uid,
                     what);
    send_error(conn, EACCES, msg);
    return false;
}

static int send_welcome(tcm_conn_t *conn, tcm_client_t *c, bool resumed)
{
    tcm_server_t *srv = conn->srv;
    Tcm__Welcome w = TCM__WELCOME__INIT;
    uint32_t sizes[TCM_NCLASSES];
    for (unsigned i = 0; i < TCM_NCLASSES; i++)
        sizes[i] = srv->h.classes[i].size;
    w.version = TCM_PROTO_VERSION;
    w.client_id = c->rec->id;
    w.heap_name = srv->heap_name;
    w.meta_name = srv->meta_name;
    w.channel_name = c->rec->chan_name;
    w.base_address = srv->base;
    w.heap_size = srv->heap_size;
    w.page_shift = TCM_PAGE_SHIFT;
    w.n_class_size = TCM_NCLASSES;
    w.class_size = sizes;
    w.max_threads = srv->max_threads;
    w.daemon_pid = (uint32_t)getpid();
    w.token = c->rec->token;
    w.heap_id = srv->meta->heap_id;
    w.resumed = resumed;
    if (resumed) { /* it has its mappings and its channel */
        reply(conn, TCM__RESPONSE__BODY_WELCOME, &w);
        return 0;
    }
    int fds[3] = {tcm__shm_open(srv->heap_name, true), tcm__shm_open(srv->meta_name, false),
                  tcm__shm_open(c->rec->chan_name, true)};
    int err = fds[0] < 0 ? fds[0] : fds[1] < 0 ? fds[1] : fds[2] < 0 ? fds[2] : tcm__lock_shared(fds[2]);
    if (!err)
        err = reply_with_fds(conn, TCM__RESPONSE__BODY_WELCOME, &w, fds, 3);
    for (int i = 0; i < 3; i++)
        tcm__close(fds[i]);
    if (err)
        tcm__log(TCM_LOG_WARN, "client %u (pid %u): cannot send its welcome: %s", c->rec->id, c->rec->pid,
                 strerror(-err));
    return err;
}

/* A client of a previous tcmd takes its record back: same channel, caches,
 * tag and counters. Only the process it belonged to may, with its token. */
static void resume(tcm_conn_t *conn, const Tcm__Hello *hello)
{
    tcm_server_t *srv = conn->srv;
    uint32_t hw = atomic_load(&srv->clients_hw);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        if (!c || c->rec->id != hello->resume_client_id)
            continue;
        uint32_t state = atomic_load(&c->rec->state);
        if (c->conn || (state != TCM_REC_ACTIVE && state != TCM_REC_EVICTED) || c->rec->token != hello->resume_token ||
            c->rec->pid != (uint32_t)conn->pid)
            break;
        c->conn = conn;
        conn->client = c;
        atomic_store(&((tcm_chan_hdr_t *)c->chan)->resume_wanted, 0);
        atomic_fetch_add(&srv->meta->stats.clients_resumed, 1);
        send_welcome(conn, c, true);
        tcm__log(TCM_LOG_INFO, "client %u (pid %u) resumed", c->rec->id, c->rec->pid);
        return;
    }
    tcm__log(TCM_LOG_WARN, "control: pid %d asked to resume client %u, which this heap does not have", (int)conn->pid,
             hello->resume_client_id);
    send_error(conn, ESRCH, "no such client to resume (the heap was replaced, or the client was reclaimed)");
}

static void handle_hello(tcm_conn_t *conn, const Tcm__Hello *hello)
{
    tcm_server_t *srv = conn->srv;
    if (!allowed_to_attach(conn))
        return;
    if (conn->client) {
        send_error(conn, EALREADY, "already attached on this connection");
        return;
    }
    if (hello->version != TCM_PROTO_VERSION) {
        char msg[96];
        snprintf(msg, sizeof msg, "protocol version %u not supported (daemon speaks %u)",
                 hello->version, TCM_PROTO_VERSION);
        send_error(conn, EPROTONOSUPPORT, msg);
        return;
    }
    if (hello->resume_client_id) {
        resume(conn, hello);
        return;
    }
    tcm_client_t *c;
    int err = tcm__client_create(srv, conn->pid, conn->uid, &c);
    if (err) {
        send_error(conn, (uint32_t)-err, err == -EMFILE ? "too many clients" : strerror(-err));
        return;
    }
    c->conn = conn;
    conn->client = c;
    if (send_welcome(conn, c, false) != 0) {
        conn_close(conn); /* the client is reclaimed (it has nothing) */
        return;
    }
    tcm__log(TCM_LOG_INFO, "client %u attached: pid %u uid %u", c->rec->id, c->rec->pid, c->rec->uid);
}

static void handle_ping(tcm_conn_t *conn, const Tcm__Ping *ping)
{
    Tcm__Pong pong = TCM__PONG__INIT;
    pong.nonce = ping->nonce;
    pong.version = TCM_PROTO_VERSION;
    pong.daemon_pid = (uint32_t)getpid();
    pong.uptime_ms = (tcm__now_ns() - conn->srv->start_ns) / 1000000;
    pong.daemon_version = TCM_VERSION_STRING;
    reply(conn, TCM__RESPONSE__BODY_PONG, &pong);
}

static void handle_stats(tcm_conn_t *conn)
{
    tcm_server_t *srv = conn->srv;
    tcm_stat_row_t rows[TCM_MAX_STAT_ROWS];
    size_t n = tcm__stats_snapshot(srv, rows, TCM_MAX_STAT_ROWS);
    Tcm__Stat st[TCM_MAX_STAT_ROWS], *stp[TCM_MAX_STAT_ROWS];
    for (size_t i = 0; i < n; i++) {
        tcm__stat__init(&st[i]);
        st[i].name = rows[i].name;
        st[i].help = (char *)rows[i].help;
        st[i].value = rows[i].value;
        st[i].fvalue = rows[i].fvalue;
        st[i].is_float = rows[i].is_float;
        stp[i] = &st[i];
    }
    double upper[TCM_LAT_BUCKETS];
    uint64_t count[TCM_LAT_BUCKETS];
    for (unsigned i = 0; i < TCM_LAT_BUCKETS; i++) {
        upper[i] = tcm__latency_upper_us(i);
        count[i] = atomic_load(&srv->dstats->latency[i]);
    }
    Tcm__Histogram hist = TCM__HISTOGRAM__INIT;
    hist.n_upper_us = hist.n_count = TCM_LAT_BUCKETS;
    hist.upper_us = upper;
    hist.count = count;
    hist.sum_ns = atomic_load(&srv->dstats->latency_sum_ns);
    Tcm__Stats stats = TCM__STATS__INIT;
    stats.n_stat = n;
    stats.stat = stp;
    stats.service_time = &hist;
    reply(conn, TCM__RESPONSE__BODY_STATS, &stats);
}

static void handle_clients(tcm_conn_t *conn)
{
    Tcm__ClientInfo *rows = calloc(TCM_MAX_CLIENTS, sizeof *rows);
    Tcm__ClientInfo **ptrs = calloc(TCM_MAX_CLIENTS, sizeof *ptrs);
    if (!rows || !ptrs) {
        free(rows);
        free(ptrs);
        send_error(conn, ENOMEM, "out of memory");
        return;
    }
    Tcm__Clients clients = TCM__CLIENTS__INIT;
    clients.n_client = tcm__clients_view(conn->srv, rows);
    for (size_t i = 0; i < clients.n_client; i++)
        ptrs[i] = &rows[i];
    clients.client = ptrs;
    reply(conn, TCM__RESPONSE__BODY_CLIENTS, &clients);
    free(rows);
    free(ptrs);
}

#define RELEASE_FLUSH_WAIT_MS 200 /* how long release waits for processes to give back what they cache */

/* Every attached process gives back what it caches (as for a full heap,
 * tcm__client_ask_flush). Waits (bounded) for the acknowledgements, so that
 * the release after it finds those pages free. */
static void flush_clients(tcm_server_t *srv)
{
    uint32_t hw = atomic_load_explicit(&srv->clients_hw, memory_order_acquire);
    uint32_t *gen = calloc(hw ? hw : 1, sizeof *gen);
    if (!gen)
        return;
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load_explicit(&srv->clients[i], memory_order_acquire);
        if (!c || atomic_load(&c->rec->state) != TCM_REC_ACTIVE)
            continue;
        gen[i] = tcm__client_ask_flush(c);
    }
    for (int waited = 0; waited < RELEASE_FLUSH_WAIT_MS; waited += 2) {
        bool all = true;
        for (uint32_t i = 0; i < hw && all; i++) {
            tcm_client_t *c = atomic_load_explicit(&srv->clients[i], memory_order_acquire);
            if (gen[i] && c && atomic_load(&c->rec->state) == TCM_REC_ACTIVE)
                all = (int32_t)(atomic_load(&((tcm_chan_hdr_t *)c->chan)->flush_ack) - gen[i]) >= 0; /* or a later ask */
        }
        if (all)
            break;
        tcm__sleep_ns(2000000);
    }
    free(gen);
}

static void handle_release(tcm_conn_t *conn)
{
    tcm_server_t *srv = conn->srv;
    flush_clients(srv);
    int64_t before = tcm__backed_bytes(srv->heap_fd);
    uint64_t released = tcm__heap_command(srv, TCM_MBOX_RELEASE);
    int64_t after = tcm__backed_bytes(srv->heap_fd);
    tcm__log(TCM_LOG_INFO, "release: %llu bytes given back (backed %lld -> %lld)",
             (unsigned long long)released, (long long)before, (long long)after);
    Tcm__Released r = TCM__RELEASED__INIT;
    r.released_bytes = released;
    r.committed_before = before > 0 ? (uint64_t)before : 0;
    r.committed_after = after > 0 ? (uint64_t)after : 0;
    reply(conn, TCM__RESPONSE__BODY_RELEASED, &r);
}

static void handle_health(tcm_conn_t *conn)
{
    tcm_server_t *srv = conn->srv;
    Tcm__Health h = TCM__HEALTH__INIT;
    uint64_t t0 = tcm__now_ns(), result;
    h.heap_thread_ok = tcm__heap_command_timed(srv, TCM_MBOX_NOP, 2000, &result) == 0;
    h.heap_thread_rtt_us = (tcm__now_ns() - t0) / 1000;
    h.ok = h.heap_thread_ok;
    h.clients = (uint32_t)atomic_load(&srv->meta->stats.clients_attached);
    h.uptime_ms = (tcm__now_ns() - srv->start_ns) / 1000000;
    h.version = TCM_VERSION_STRING;
    h.message = h.ok ? "ok" : "the heap thread did not answer within 2 s";
    reply(conn, TCM__RESPONSE__BODY_HEALTH, &h);
}

static void handle_classes(tcm_conn_t *conn)
{
    Tcm__ClassInfo rows[TCM_NCLASSES], *ptrs[TCM_NCLASSES];
    Tcm__Classes classes = TCM__CLASSES__INIT;
    classes.n_cls = tcm__classes_view(conn->srv, rows);
    for (size_t i = 0; i < classes.n_cls; i++)
        ptrs[i] = &rows[i];
    classes.cls = ptrs;
    reply(conn, TCM__RESPONSE__BODY_CLASSES, &classes);
}

static void send_config(tcm_conn_t *conn, const char *only)
{
    Tcm__Setting set[32], *ptrs[32];
    char values[32][64];
    size_t n = 0;
    const tcm_setting_info_t *info;
    for (size_t i = 0; (info = tcm__config_setting(i)) && n < 32; i++) {
        if (only && *only && strcmp(only, info->name) != 0)
            continue;
        tcm__setting__init(&set[n]);
        tcm__config_get(conn->srv, info->name, values[n], sizeof values[n]);
        set[n].key = (char *)info->name;
        set[n].value = values[n];
        set[n].runtime = info->runtime;
        set[n].help = (char *)info->help;
        ptrs[n] = &set[n];
        n++;
    }
    Tcm__Config cfg = TCM__CONFIG__INIT;
    cfg.n_setting = n;
    cfg.setting = ptrs;
    reply(conn, TCM__RESPONSE__BODY_CONFIG, &cfg);
}

static void handle_config_get(tcm_conn_t *conn, const Tcm__ConfigGet *get)
{
    char value[64];
    if (get->key && *get->key && tcm__config_get(conn->srv, get->key, value, sizeof value) != 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "unknown setting '%.60s' (tcmctl config get lists them)", get->key);
        send_error(conn, ENOENT, msg);
        return;
    }
    send_config(conn, get->key);
}

static void handle_config_set(tcm_conn_t *conn, const Tcm__ConfigSet *set)
{
    char err[256];
    if (!allowed_to_change(conn, "config set"))
        return;
    int rc = tcm__config_set(conn->srv, set->key ? set->key : "", set->value ? set->value : "", true, err,
                             sizeof err);
    if (rc) {
        send_error(conn, (uint32_t)-rc, err);
        return;
    }
    send_config(conn, set->key);
}

static void handle_resize(tcm_conn_t *conn, const Tcm__Resize *rs)
{
    tcm_server_t *srv = conn->srv;
    char err[256], value[32];
    if (!allowed_to_change(conn, "resize"))
        return;
    uint64_t old = atomic_load(&srv->meta->config.heap_limit);
    snprintf(value, sizeof value, "%llu", (unsigned long long)rs->limit);
    int rc = tcm__config_set(srv, "heap_limit", value, true, err, sizeof err);
    if (rc) {
        send_error(conn, (uint32_t)-rc, err);
        return;
    }
    Tcm__Resized r = TCM__RESIZED__INIT;
    r.old_limit = old;
    r.new_limit = atomic_load(&srv->meta->config.heap_limit);
    reply(conn, TCM__RESPONSE__BODY_RESIZED, &r);
}

static void handle_roots(tcm_conn_t *conn)
{
    tcm_server_t *srv = conn->srv;
    static Tcm__RootInfo infos[TCM_ROOTS];
    static Tcm__RootInfo *ptrs[TCM_ROOTS];
    static char names[TCM_ROOTS][TCM_ROOT_NAME_MAX];
    size_t n = 0;
    for (unsigned i = 0; i < TCM_ROOTS; i++) {
        bool used;
        uint64_t off;
        tcm__root_read(&srv->h.roots[i], &used, &off, names[n]);
        if (!used)
            continue;
        tcm__root_info__init(&infos[n]);
        infos[n].name = names[n];
        infos[n].offset = off;
        ptrs[n] = &infos[n];
        n++;
    }
    Tcm__Roots roots = TCM__ROOTS__INIT;
    roots.n_root = n;
    roots.root = ptrs;
    reply(conn, TCM__RESPONSE__BODY_ROOTS, &roots);
}

static void handle_detach(tcm_conn_t *conn, const Tcm__Detach *d)
{
    tcm_server_t *srv = conn->srv;
    if (!allowed_to_change(conn, "detach"))
        return;
    uint32_t hw = atomic_load(&srv->clients_hw);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        uint32_t expected = TCM_REC_ACTIVE;
        if (c && c->rec->id == d->client_id &&
            atomic_compare_exchange_strong(&c->rec->state, &expected, TCM_REC_EVICTED)) {
            tcm__log(TCM_LOG_WARN, "client %u (pid %u) detached by an operator: its allocations now fail",
                     c->rec->id, c->rec->pid);
            Tcm__Detached r = TCM__DETACHED__INIT;
            r.client_id = c->rec->id;
            r.pid = c->rec->pid;
            reply(conn, TCM__RESPONSE__BODY_DETACHED, &r);
            return;
        }
    }
    send_error(conn, ENOENT, "no attached client with that id (tcmctl clients lists them)");
}

static void handle_check(tcm_conn_t *conn)
{
    tcm_server_t *srv = conn->srv;
    uint64_t t0 = tcm__now_ns();
    uint64_t bad = tcm__heap_command(srv, TCM_MBOX_CHECK);
    Tcm__CheckResult r = TCM__CHECK_RESULT__INIT;
    r.ok = bad == 0;
    r.message = srv->mbox_text;
    r.duration_us = (tcm__now_ns() - t0) / 1000;
    tcm__log(r.ok ? TCM_LOG_INFO : TCM_LOG_ERROR, "check: %s", srv->mbox_text);
    reply(conn, TCM__RESPONSE__BODY_CHECK, &r);
}

static void handle_frame(tcm_conn_t *conn, const uint8_t *data, size_t len)
{
    Tcm__Request *req = tcm__request__unpack(NULL, len, data);
    if (!req) {
        tcm__log_limited(TCM_LOG_WARN, "control: malformed request from pid %d (%zu bytes)",
                         (int)conn->pid, len);
        send_error(conn, EBADMSG, "malformed request");
        return;
    }
    if (req->version != TCM_PROTO_VERSION) {
        char msg[96];
        snprintf(msg, sizeof msg, "protocol version %u not supported (tcmd speaks %u)", req->version,
                 TCM_PROTO_VERSION);
        send_error(conn, EPROTONOSUPPORT, msg);
        tcm__request__free_unpacked(req, NULL);
        return;
    }
    switch (req->body_case) {
    case TCM__REQUEST__BODY_HELLO:
        handle_hello(conn, req->hello);
        break;
    case TCM__REQUEST__BODY_PING:
        handle_ping(conn, req->ping);
        break;
    case TCM__REQUEST__BODY_STATS:
        handle_stats(conn);
        break;
    case TCM__REQUEST__BODY_CLIENTS:
        handle_clients(conn);
        break;
    case TCM__REQUEST__BODY_RELEASE:
        if (allowed_to_change(conn, "release"))
            handle_release(conn);
        break;
    case TCM__REQUEST__BODY_HEALTH:
        handle_health(conn);
        break;
    case TCM__REQUEST__BODY_CLASSES:
        handle_classes(conn);
        break;
    case TCM__REQUEST__BODY_CONFIG_GET:
        handle_config_get(conn, req->config_get);
        break;
    case TCM__REQUEST__BODY_CONFIG_SET:
        handle_config_set(conn, req->config_set);
        break;
    case TCM__REQUEST__BODY_RESIZE:
        handle_resize(conn, req->resize);
        break;
    case TCM__REQUEST__BODY_ROOTS:
        handle_roots(conn);
        break;
    case TCM__REQUEST__BODY_DETACH:
        handle_detach(conn, req->detach);
        break;
    case TCM__REQUEST__BODY_CHECK:
        handle_check(conn);
        break;
    case TCM__REQUEST__BODY_BYE:
        if (conn->client)
            atomic_store(&conn->client->rec->said_bye, 1);
        break;
    default:
        send_error(conn, EOPNOTSUPP, "unknown request");
        break;
    }
    tcm__request__free_unpacked(req, NULL);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    tcm_conn_t *conn = handle->data;
    size_t cap = TCM_FRAME_MAX + 4;
    (void)suggested;
    if (!conn->buf)
        conn->buf = malloc(cap);
    if (!conn->buf || conn->len >= cap) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init((char *)conn->buf + conn->len, (unsigned)(cap - conn->len));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    tcm_conn_t *conn = stream->data;
    (void)buf;
    if (nread < 0) {
        conn_close(conn);
        return;
    }
    conn->len += (size_t)nread;
    size_t pos = 0;
    while (!conn->closing) {
        const uint8_t *payload;
        size_t n;
        int r = tcm__frame_next(conn->buf + pos, conn->len - pos, &payload, &n);
        if (r == 0)
            break;
        if (r < 0) {
            tcm__log_limited(TCM_LOG_WARN, "control: frame of %u bytes from pid %d refused",
                             tcm__frame_len(conn->buf + pos), (int)conn->pid);
            send_error(conn, EMSGSIZE, "frame too large");
            conn_close(conn);
            return;
        }
        handle_frame(conn, payload, n);
        pos += 4 + n;
    }
    if (pos) {
        memmove(conn->buf, conn->buf + pos, conn->len - pos);
        conn->len -= pos;
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    tcm_server_t *srv = server->data;
    if (status < 0) {
        tcm__log(TCM_LOG_WARN, "accept failed: %s", uv_strerror(status));
        return;
    }
    tcm_conn_t *conn = calloc(1, sizeof *conn);
    if (!conn)
        return;
    conn->srv = srv;
    uv_pipe_init(srv->loop, &conn->pipe, 0);
    conn->pipe.data = conn;
    if (uv_accept(server, (uv_stream_t *)&conn->pipe) != 0) {
        uv_close((uv_handle_t *)&conn->pipe, on_close);
        return;
    }
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&conn->pipe, &fd) != 0 ||
        tcm__peer_cred(fd, &conn->pid, &conn->uid, &conn->gid) != 0) {
        uv_close((uv_handle_t *)&conn->pipe, on_close);
        return;
    }
    uv_read_start((uv_stream_t *)&conn->pipe, on_alloc, on_read);
}

static void on_reaped(uv_async_t *async)
{
    tcm_server_t *srv = async->data;
    pthread_mutex_lock(&srv->reaped_lock);
    tcm_client_t *list = srv->reaped;
    srv->reaped = NULL;
    pthread_mutex_unlock(&srv->reaped_lock);
    while (list) {
        tcm_client_t *next = list->next_reaped;
        tcm__client_destroy(srv, list);
        list = next;
    }
}

/* Adopted clients that have not reconnected have no connection whose EOF
 * would tell us they died: their channel lock does. */
static void on_liveness(uv_timer_t *timer)
{
    tcm_server_t *srv = timer->data;
    uint32_t hw = atomic_load(&srv->clients_hw);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        uint32_t state = c ? atomic_load(&c->rec->state) : TCM_REC_FREE;
        if (!c || c->conn || (state != TCM_REC_ACTIVE && state != TCM_REC_EVICTED) || tcm__client_alive(c))
            continue;
        tcm__log(TCM_LOG_WARN, "client %u (pid %u) of the previous tcmd died before it reconnected", c->rec->id,
                 c->rec->pid);
        atomic_store_explicit(&c->rec->state, TCM_REC_DEAD, memory_order_release);
        tcm__heap_kick(srv);
    }
}

int tcm__control_start(tcm_server_t *srv)
{
    int err;
    uv_timer_init(srv->loop, &srv->liveness);
    srv->liveness.data = srv;
    uv_timer_start(&srv->liveness, on_liveness, 1000, 1000);
    uv_async_init(srv->loop, &srv->reaped_async, on_reaped);
    srv->reaped_async.data = srv;
    uv_pipe_init(srv->loop, &srv->listener, 0);
    srv->listener.data = srv;
    /* bound under a temporary name and renamed over the path, so that the
     * path never disappears: clients waiting through a restart see the old
     * socket refuse, then the new one answer */
    char tmp[sizeof srv->socket_path + 8];
    snprintf(tmp, sizeof tmp, "%s.new", srv->socket_path);
    unlink(tmp);
    mode_t old = umask(0077); /* the socket is owner-only */
    err = uv_pipe_bind(&srv->listener, tmp);
    umask(old);
    if (err) {
        tcm__log(TCM_LOG_ERROR, "bind(%s) failed: %s", tmp, uv_strerror(err));
        return err;
    }
    err = uv_listen((uv_stream_t *)&srv->listener, 128, on_connection);
    if (err) {
        tcm__log(TCM_LOG_ERROR, "listen(%s) failed: %s", tmp, uv_strerror(err));
        return err;
    }
    if (srv->allow_group_set && (err = tcm__path_share(tmp, srv->allow_group, 0660)) != 0) {
        tcm__log(TCM_LOG_ERROR, "chown/chmod(%s, group %u) failed: %s", tmp, (unsigned)srv->allow_group,
                 strerror(-err));
        return err;
    }
    if (rename(tmp, srv->socket_path) != 0) {
        err = -errno;
        tcm__log(TCM_LOG_ERROR, "rename(%s, %s) failed: %s", tmp, srv->socket_path, strerror(errno));
        return err;
    }
    return 0;
}

static void close_walk(uv_handle_t *handle, void *arg)
{
    tcm_server_t *srv = arg;
    if (uv_is_closing(handle))
        return;
    if (handle->type == UV_NAMED_PIPE && handle != (uv_handle_t *)&srv->listener) {
        tcm_conn_t *conn = handle->data;
        conn->client = NULL; /* the daemon is going away; nothing to reclaim */
        conn_close(conn);
        return;
    }
    uv_close(handle, NULL);
}

void tcm__control_close(tcm_server_t *srv)
{
    uv_walk(srv->loop, close_walk, srv);
    uv_run(srv->loop, UV_RUN_DEFAULT);
    on_reaped(&srv->reaped_async);
    /* libuv removes the socket file when it closes the listener; a heap left
     * for the next tcmd keeps one, so that new processes wait for it */
    if (srv->keep_segments)
        tcm__socket_placeholder(srv->socket_path);
    else
        unlink(srv->socket_path);
}
