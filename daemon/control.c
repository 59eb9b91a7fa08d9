/* control.c — the libuv control socket's transport: connections, bounded
 * length-prefixed protobuf frames, replies, access checks, and the timers
 * and wakeups of the main loop (liveness of adopted clients, reaped
 * clients, the mailbox). handlers.c answers the requests. A client is
 * alive while its process runs (a pidfd per client, polled here), never
 * because of its connection: a process that closes its socket keeps its
 * caches, is told to reconnect, and resumes as the same client. Main
 * thread only. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "log.h"
#include "metrics.h"
#include "prim.h"
#include "control.h"
#include "server.h"

/* What one control peer may cost. A reply waits in libuv's queue only once
 * the peer has left its socket's buffer (about 200 KiB on Linux) unread, so
 * a tcmctl, which sends one request and reads its reply, never has any
 * queued, and its reply goes whatever its size (`clients` is about 25
 * bytes a client, so about 25 KiB for all 1024; 77 KiB at the widest).
 * A peer with more than TCM_CONN_QUEUE_PAUSE queued is not read from (and
 * the frames it already sent wait) until the queue is half drained: what it
 * costs stays one frame buffer plus that queue plus one reply. */
#define TCM_CONN_QUEUE_PAUSE (64u << 10)
/* Beyond this the peer is closed: pausing keeps a queue under PAUSE plus
 * one reply (a frame of at most TCM_FRAME_MAX), so only a reply far larger
 * than any tcmd makes gets here. */
#define TCM_CONN_QUEUE_MAX (1u << 20)
/* A peer whose queue has not moved for this long while paused is closed
 * (its descriptor and queue go back). For an attached client that is no
 * death sentence: its process is alive, so it keeps its caches and
 * reconnects at its next slow path (client_disconnected). */
#define TCM_CONN_STALL_NS (5000ull * 1000000ull)
/* Control connections at once: every attached client holds one, and
 * tcmctl and attaching processes need some more; past it a connection is
 * refused at once. */
#define TCM_CONTROL_MAX_CONNS (4u * TCM_MAX_CLIENTS)
/* Descriptors besides connections, channels and pidfds: the segments, the
 * log, libuv's own, the descriptors a Welcome sends (briefly open). */
#define TCM_FD_RESERVE 256u

static void free_conn(tcm_conn_t *conn)
{
    free(conn->buf);
    free(conn);
}

/* A connection waiting for the heap thread is freed when its answer comes
 * (tcm__conn_resume). */
static void on_close(uv_handle_t *handle)
{
    tcm_conn_t *conn = handle->data;
    conn->srv->control_conns--;
    conn->handle_closed = true;
    if (!conn->waiting)
        free_conn(conn);
}

/* A client's connection has gone. If it said Bye, it detached: reclaim.
 * If its process has ended, it died: reclaim. A living process has only
 * lost its connection (it closed the descriptor, or the connection broke):
 * its caches are still in use, so nothing is taken back; it is told so
 * through its channel and reconnects as the same client at its next slow
 * path. */
static void client_disconnected(tcm_server_t *srv, tcm_client_t *c)
{
    tcm_client_rec_t *rec = c->rec;
    if (atomic_load(&rec->said_bye) || !tcm__client_alive(c)) {
        tcm__log(TCM_LOG_DEBUG, "client %u (pid %u): control connection closed", rec->id, rec->pid);
        tcm__client_gone(srv, c);
        return;
    }
    tcm__log_peer(TCM_LOG_INFO, rec->pid, "client %u (pid %u): lost its control connection while running; kept, asked to "
                     "reconnect", rec->id, rec->pid);
    TCM_STAT_ADD_MAIN(srv->meta, clients_disconnected, 1);
    atomic_store(&((tcm_chan_hdr_t *)c->chan)->resume_wanted, 1);
}

void tcm__client_gone(tcm_server_t *srv, tcm_client_t *c)
{
    uint32_t state = atomic_load(&c->rec->state);
    if (state != TCM_REC_ACTIVE && state != TCM_REC_EVICTED)
        return;
    atomic_store_explicit(&c->rec->state, TCM_REC_DEAD, memory_order_release);
    tcm__heap_kick(srv);
}

void tcm__conn_close(tcm_conn_t *conn)
{
    if (conn->closing)
        return;
    conn->closing = true;
    tcm_client_t *c = conn->client;
    if (c) {
        c->conn = NULL;
        conn->client = NULL;
        client_disconnected(conn->srv, c);
    }
    uv_close((uv_handle_t *)&conn->pipe, on_close);
}

static void handle_frames(tcm_conn_t *conn);
static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

static void on_write(uv_write_t *req, int status)
{
    tcm_conn_t *conn = req->handle->data;
    free(req->data);
    free(req);
    if (conn->closing)
        return;
    if (status < 0) { /* the peer is gone: a paused connection reads no EOF to say so */
        tcm__conn_close(conn);
        return;
    }
    conn->drained_ns = tcm__now_ns();
    if (conn->paused && uv_stream_get_write_queue_size((uv_stream_t *)&conn->pipe) <= TCM_CONN_QUEUE_PAUSE / 2) {
        conn->paused = false;
        uv_read_start((uv_stream_t *)&conn->pipe, on_alloc, on_read);
        handle_frames(conn); /* those it sent before the pause */
    }
}

/* After a reply was queued: pause a peer that does not read its replies,
 * close one whose queue is past any reply tcmd makes. */
static void check_queue(tcm_conn_t *conn)
{
    size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&conn->pipe);
    if (queued > TCM_CONN_QUEUE_MAX) {
        tcm__log_peer(TCM_LOG_WARN, conn->pid, "control: pid %d does not read its replies (%zu bytes waiting): "
                      "connection closed", (int)conn->pid, queued);
        tcm__conn_close(conn);
    } else if (queued > TCM_CONN_QUEUE_PAUSE && !conn->paused) {
        conn->paused = true;
        conn->paused_ns = tcm__now_ns();
        uv_read_stop((uv_stream_t *)&conn->pipe);
    }
}

static void send_response(tcm_conn_t *conn, const Tcm__Response *resp)
{
    if (conn->closing)
        return; /* it went away while its answer was being made */
    size_t len;
    uint8_t *buf = tcm__frame_pack(&resp->base, &len);
    uv_write_t *req = malloc(sizeof *req);
    if (!buf || !req) {
        free(buf);
        free(req);
        tcm__conn_close(conn);
        return;
    }
    req->data = buf;
    uv_buf_t b = uv_buf_init((char *)buf, (unsigned)len);
    if (uv_write(req, (uv_stream_t *)&conn->pipe, &b, 1, on_write) != 0) {
        free(buf);
        free(req);
        tcm__conn_close(conn);
        return;
    }
    check_queue(conn);
}

/* Answer with one body of the Response oneof (its members share storage). */
void tcm__conn_reply(tcm_conn_t *conn, Tcm__Response__BodyCase which, void *body)
{
    Tcm__Response resp = TCM__RESPONSE__INIT;
    resp.body_case = which;
    resp.welcome = body;
    send_response(conn, &resp);
}

/* A connection's OS handle, as the platform layer takes it (a descriptor,
 * or a pipe HANDLE's value on Windows). */
static int conn_handle(tcm_conn_t *conn, tcm_handle_t *out)
{
    uv_os_fd_t fd;
    int err = uv_fileno((uv_handle_t *)&conn->pipe, &fd);
    *out = (tcm_handle_t)(intptr_t)fd;
    return err;
}

/* The Welcome of a new client carries its segments as descriptors: the
 * heap read-write, the metadata read-only (a read-only open file
 * description cannot be mapped writable) and its own open file description
 * of its channel, already holding the liveness lock. Sent directly, not
 * through libuv's write queue, which cannot carry descriptors. Where
 * descriptors do not travel (Windows) it goes as any reply, and the client
 * opens the segments by name. */
int tcm__conn_reply_with_fds(tcm_conn_t *conn, Tcm__Response__BodyCase which, void *body, const tcm_handle_t *fds,
                             int nfds)
{
    if (!tcm__handles_travel()) {
        tcm__conn_reply(conn, which, body);
        return 0;
    }
    Tcm__Response resp = TCM__RESPONSE__INIT;
    resp.body_case = which;
    resp.welcome = body;
    size_t len;
    uint8_t *buf = tcm__frame_pack(&resp.base, &len);
    tcm_handle_t sock;
    int err = !buf ? -ENOMEM
              : uv_stream_get_write_queue_size((uv_stream_t *)&conn->pipe) || conn_handle(conn, &sock)
                  ? -EBUSY
                  : tcm__send_with_fds(sock, buf, len, fds, nfds);
    free(buf);
    return err;
}

static bool refuse_access(tcm_conn_t *conn, const char *what);
void tcm__conn_error(tcm_conn_t *conn, uint32_t code, const char *msg)
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
bool tcm__conn_may_change(tcm_conn_t *conn, const char *what)
{
    if (conn->uid == tcm__uid() || conn->uid == 0)
        return true;
    return refuse_access(conn, what);
}

/* Attaching is also for the members of --allow-group: the segments reach
 * them as descriptors, the metadata read-only. */
bool tcm__conn_may_attach(tcm_conn_t *conn)
{
    tcm_server_t *srv = conn->srv;
    tcm_handle_t fd;
    if (conn->uid == tcm__uid() || conn->uid == 0 ||
        (srv->allow_group_set && conn_handle(conn, &fd) == 0 &&
         tcm__peer_in_group(fd, conn->gid, srv->allow_group)))
        return true;
    return refuse_access(conn, "attaching");
}

static bool refuse_access(tcm_conn_t *conn, const char *what)
{
    char msg[160];
    snprintf(msg, sizeof msg, "permission denied: %s needs uid %u or root%s (you are uid %u)", what,
             tcm__uid(), strcmp(what, "attaching") == 0 && conn->srv->allow_group_set ? " or the allowed group" : "",
             (unsigned)conn->uid);
    tcm__log_peer(TCM_LOG_WARN, conn->pid, "control: pid %d uid %u refused: %s", (int)conn->pid, (unsigned)conn->uid,
                  what);
    tcm__conn_error(conn, EACCES, msg);
    return false;
}

/* Decode and answer the frames read, in order; a request answered later
 * holds back the ones after it. Each frame leaves the buffer before it is
 * answered: an answer that completes at once resumes the connection from
 * inside its handler, which calls this again. */
static void handle_frames(tcm_conn_t *conn)
{
    while (!conn->closing && !conn->waiting && !conn->paused) {
        const uint8_t *payload;
        size_t n;
        int r = tcm__frame_next(conn->buf, conn->len, &payload, &n);
        if (r == 0)
            return;
        if (r < 0) {
            tcm__log_peer(TCM_LOG_WARN, conn->pid, "control: frame of %u bytes from pid %d refused",
                          tcm__frame_len(conn->buf), (int)conn->pid);
            tcm__conn_error(conn, EMSGSIZE, "frame too large");
            tcm__conn_close(conn);
            return;
        }
        Tcm__Request *req = tcm__request__unpack(NULL, n, payload); /* copies what it keeps */
        memmove(conn->buf, conn->buf + 4 + n, conn->len - 4 - n);
        conn->len -= 4 + n;
        if (!req) {
            tcm__log_peer(TCM_LOG_WARN, conn->pid, "control: malformed request from pid %d (%zu bytes)",
                          (int)conn->pid, n);
            tcm__conn_error(conn, EBADMSG, "malformed request");
            continue;
        }
        if (req->version != TCM_PROTO_VERSION) {
            char msg[96];
            snprintf(msg, sizeof msg, "protocol version %u not supported (tcmd speaks %u)", req->version,
                     TCM_PROTO_VERSION);
            tcm__conn_error(conn, EPROTONOSUPPORT, msg);
        } else {
            tcm__control_handle(conn, req);
        }
        tcm__request__free_unpacked(req, NULL);
    }
}

void tcm__conn_wait(tcm_conn_t *conn)
{
    conn->waiting = true;
}

void tcm__conn_resume(tcm_conn_t *conn)
{
    conn->waiting = false;
    if (conn->handle_closed)
        free_conn(conn);
    else
        handle_frames(conn);
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
        tcm__conn_close(conn);
        return;
    }
    conn->len += (size_t)nread;
    handle_frames(conn);
}

/* One connection past the cap: told why in one frame (without waiting for
 * it to be read) and closed, so refusing costs what accepting does. */
static void refuse_connection(tcm_conn_t *conn)
{
    tcm_server_t *srv = conn->srv;
    char msg[96];
    snprintf(msg, sizeof msg, "tcmd has %u control connections open, its limit: try again later",
             srv->control_max_conns);
    Tcm__Response resp = TCM__RESPONSE__INIT;
    Tcm__Error err = TCM__ERROR__INIT;
    err.code = EBUSY;
    err.message = msg;
    resp.body_case = TCM__RESPONSE__BODY_ERROR;
    resp.error = &err;
    size_t len;
    uint8_t *buf = tcm__frame_pack(&resp.base, &len);
    if (buf) {
        uv_buf_t b = uv_buf_init((char *)buf, (unsigned)len);
        (void)uv_try_write((uv_stream_t *)&conn->pipe, &b, 1);
        free(buf);
    }
    tcm__log_peer(TCM_LOG_WARN, conn->pid, "control: pid %d refused: %u connections open, the limit",
                  (int)conn->pid, srv->control_max_conns);
    conn->closing = true;
    uv_close((uv_handle_t *)&conn->pipe, on_close);
}

static void on_connection(uv_stream_t *server, int status)
{
    tcm_server_t *srv = server->data;
    if (status < 0) { /* out of descriptors, most likely: libuv drops the connection */
        tcm__log_peer(TCM_LOG_WARN, TCM_LOG_PEER_UNKNOWN, "accept(%s) failed: %s", srv->socket_path,
                      uv_strerror(status));
        return;
    }
    tcm_conn_t *conn = calloc(1, sizeof *conn);
    if (!conn)
        return;
    conn->srv = srv;
    uv_pipe_init(srv->loop, &conn->pipe, 0);
    conn->pipe.data = conn;
    srv->control_conns++;
    if (uv_accept(server, (uv_stream_t *)&conn->pipe) != 0) {
        uv_close((uv_handle_t *)&conn->pipe, on_close);
        return;
    }
    tcm_handle_t fd;
    if (conn_handle(conn, &fd) != 0 ||
        tcm__peer_cred(fd, &conn->pid, &conn->uid, &conn->gid) != 0) {
        uv_close((uv_handle_t *)&conn->pipe, on_close);
        return;
    }
    if (srv->control_conns > srv->control_max_conns) {
        refuse_connection(conn);
        return;
    }
    uv_read_start((uv_stream_t *)&conn->pipe, on_alloc, on_read);
}

static void on_proc_closed(uv_handle_t *handle)
{
    tcm_client_t *c = handle->data;
    tcm__client_destroy(c->srv, c);
}

/* Every second: close peers stuck on unread replies; end log windows. */
static void stall_walk(uv_handle_t *handle, void *arg)
{
    tcm_server_t *srv = arg;
    if (handle->type != UV_NAMED_PIPE || handle == (uv_handle_t *)&srv->listener || uv_is_closing(handle))
        return;
    tcm_conn_t *conn = handle->data;
    uint64_t now = tcm__now_ns(), since = conn->paused_ns > conn->drained_ns ? conn->paused_ns : conn->drained_ns;
    if (!conn->paused || now - since < TCM_CONN_STALL_NS)
        return;
    tcm__log_peer(TCM_LOG_WARN, conn->pid, "control: pid %d has not read its replies for %llu s (%zu bytes "
                  "waiting): connection closed", (int)conn->pid,
                  (unsigned long long)(TCM_CONN_STALL_NS / 1000000000ull),
                  uv_stream_get_write_queue_size((uv_stream_t *)&conn->pipe));
    tcm__conn_close(conn);
}

static void on_sweep(uv_timer_t *timer)
{
    tcm_server_t *srv = timer->data;
    uv_walk(srv->loop, stall_walk, srv);
    tcm__log_peer_tick();
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
        if (list->conn) { /* a reaped client has no say any more */
            list->conn->client = NULL;
            tcm__conn_close(list->conn);
        }
        if (list->proc_polled && !uv_is_closing((uv_handle_t *)&list->proc_poll))
            uv_close((uv_handle_t *)&list->proc_poll, on_proc_closed);
        else
            tcm__client_destroy(srv, list);
        list = next;
    }
}

static void on_proc_exit(uv_poll_t *poll, int status, int events)
{
    tcm_client_t *c = poll->data;
    (void)status, (void)events;
    uv_poll_stop(poll);
    tcm__log(TCM_LOG_DEBUG, "client %u (pid %u): process ended", c->rec->id, c->rec->pid);
    tcm__client_gone(c->srv, c);
}

void tcm__client_watch(tcm_server_t *srv, tcm_client_t *c)
{
    c->srv = srv;
    if (!tcm__proc_watch_pollable() || c->proc < 0 || c->proc_polled)
        return;
    if (uv_poll_init(srv->loop, &c->proc_poll, c->proc) != 0)
        return; /* the liveness timer still asks every second */
    c->proc_polled = true;
    c->proc_poll.data = c;
    uv_poll_start(&c->proc_poll, UV_READABLE, on_proc_exit);
}

/* A client whose channel broke under tcmd (shrunk or punched: its mapping
 * in tcmd now reads zeros) loses its attachment: it is evicted, its
 * connection is closed and it may not resume. What its caches listed is
 * reclaimed from what can still be read once its process has ended. */
static void cut_off(tcm_server_t *srv, tcm_client_t *c)
{
    c->cut_off = true;
    tcm__log_peer(TCM_LOG_WARN, c->rec->pid,
                     "client %u (pid %u): its channel %s was shrunk or punched under tcmd: cut off (its memory "
                     "comes back when its process ends)",
                     c->rec->id, c->rec->pid, c->rec->chan_name);
    TCM_STAT_ADD_MAIN(srv->meta, clients_cut_off, 1);
    uint32_t state = TCM_REC_ACTIVE;
    atomic_compare_exchange_strong(&c->rec->state, &state, TCM_REC_EVICTED);
    if (c->conn) {
        tcm_conn_t *conn = c->conn;
        c->conn = NULL;
        conn->client = NULL;
        tcm__conn_close(conn);
    }
}

/* Every second: clients whose process ended without the poll noticing
 * (adopted ones, platforms without pidfds), and channels that broke. */
static void on_liveness(uv_timer_t *timer)
{
    tcm_server_t *srv = timer->data;
    if (atomic_load(&srv->heap_truncated) && !srv->heap_truncated_told) {
        srv->heap_truncated_told = true;
        tcm__log(TCM_LOG_ERROR, "heap segment %s was truncated by a client: the contents of every object are lost",
                 srv->heap_name);
    }
    uint32_t hw = atomic_load(&srv->clients_hw);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        uint32_t state = c ? atomic_load(&c->rec->state) : TCM_REC_FREE;
        if (state != TCM_REC_ACTIVE && state != TCM_REC_EVICTED)
            continue;
        if (atomic_load(&c->chan_broken) && !c->cut_off)
            cut_off(srv, c);
        if (tcm__client_alive(c))
            continue;
        tcm__log(TCM_LOG_INFO, "client %u (pid %u) has ended%s", c->rec->id, c->rec->pid,
                 c->conn ? "" : " (it had no connection)");
        tcm__client_gone(srv, c);
    }
}

/* Descriptors: a control connection is one, an attached client also has
 * its channel and its pidfd open in tcmd. The soft limit goes up to what
 * the caps need; under a lower hard limit the connection cap shrinks to fit
 * (each connection may become a client of three). */
static void fit_descriptors(tcm_server_t *srv)
{
    uint64_t want = TCM_CONTROL_MAX_CONNS + 2ull * TCM_MAX_CLIENTS + TCM_METRICS_MAX_CONNS + TCM_FD_RESERVE, now = 0;
    int err = tcm__fd_limit_raise(want, &now);
    srv->control_max_conns = TCM_CONTROL_MAX_CONNS;
    if (!err && now >= want)
        return;
    uint64_t fixed = TCM_FD_RESERVE + TCM_METRICS_MAX_CONNS, avail = now > fixed + 48 ? now - fixed : 48;
    srv->control_max_conns = (uint32_t)(avail >= 3ull * TCM_MAX_CLIENTS ? avail - 2ull * TCM_MAX_CLIENTS : avail / 3);
    tcm__log(TCM_LOG_WARN, "setrlimit(RLIMIT_NOFILE, %llu) failed: %s: the limit is %llu descriptors, so at most %u "
             "control connections (raise the hard limit to %llu for %u clients)",
             (unsigned long long)want, err ? strerror(-err) : "above the hard limit", (unsigned long long)now,
             srv->control_max_conns, (unsigned long long)want, TCM_MAX_CLIENTS);
}

int tcm__control_start(tcm_server_t *srv)
{
    int err;
    fit_descriptors(srv);
    uv_timer_init(srv->loop, &srv->liveness);
    srv->liveness.data = srv;
    uv_timer_start(&srv->liveness, on_liveness, 1000, 1000);
    uv_timer_init(srv->loop, &srv->conn_sweep);
    srv->conn_sweep.data = srv;
    uv_timer_start(&srv->conn_sweep, on_sweep, 1000, 1000);
    uint32_t hw = atomic_load(&srv->clients_hw);
    for (uint32_t i = 0; i < hw; i++) { /* adopted ones */
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        if (c)
            tcm__client_watch(srv, c);
    }
    uv_async_init(srv->loop, &srv->reaped_async, on_reaped);
    srv->reaped_async.data = srv;
    tcm__mailbox_start(srv);
    uv_pipe_init(srv->loop, &srv->listener, 0);
    srv->listener.data = srv;
    /* bound under a temporary name and renamed over the path, so that the
     * path never disappears: clients waiting through a restart see the old
     * socket refuse, then the new one answer */
    char tmp[sizeof srv->socket_path + 16];
    if ((err = tcm__socket_bind_name(srv->socket_path, tmp, sizeof tmp)) != 0) {
        tcm__log(TCM_LOG_ERROR, "socket %s: %s", srv->socket_path, strerror(-err));
        return err;
    }
    unsigned old = tcm__umask(0077); /* the socket is owner-only */
    err = uv_pipe_bind(&srv->listener, tmp);
    tcm__umask(old);
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
    if ((err = tcm__socket_publish(tmp, srv->socket_path)) != 0) {
        tcm__log(TCM_LOG_ERROR, "rename(%s, %s) failed: %s", tmp, srv->socket_path, strerror(-err));
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
        if (conn->client) /* the daemon is going away; nothing to reclaim */
            conn->client->conn = NULL;
        conn->client = NULL;
        tcm__conn_close(conn);
        return;
    }
    uv_close(handle, NULL);
}

void tcm__control_close(tcm_server_t *srv)
{
    tcm__mailbox_cancel(srv); /* the heap thread has stopped: what waits for it is answered now */
    uv_walk(srv->loop, close_walk, srv);
    uv_run(srv->loop, UV_RUN_DEFAULT);
    on_reaped(&srv->reaped_async);
    /* libuv removes the socket file when it closes the listener; a heap left
     * for the next tcmd keeps one, so that new processes wait for it */
    if (srv->keep_segments)
        tcm__socket_placeholder(srv->socket_path);
    else
        tcm__unlink(srv->socket_path);
}
