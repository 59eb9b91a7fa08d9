/* transport.c — the control socket's transport: the listener, its
 * connections, bounded length-prefixed protobuf frames in, replies out,
 * and peers that stop reading their replies paused, then closed. What a
 * request asks is the handler's business (handlers.c, through the
 * callbacks control.c gives tcm__transport_listen). Main thread only. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "log.h"
#include "prim.h"
#include "server.h"
#include "transport.h"

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

void tcm__conn_close(tcm_conn_t *conn)
{
    if (conn->closing)
        return;
    conn->closing = true;
    tcm_server_t *srv = conn->srv;
    if (conn->listed) {
        conn->listed = false;
        tcm__shares_drop(&srv->conn_shares, conn->uid);
        if (conn->prev)
            conn->prev->next = conn->next;
        else
            srv->conns = conn->next;
        if (conn->next)
            conn->next->prev = conn->prev;
    }
    conn->srv->control_cbs->closed(conn);
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

int tcm__conn_os_handle(tcm_conn_t *conn, tcm_handle_t *out)
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
              : uv_stream_get_write_queue_size((uv_stream_t *)&conn->pipe) || tcm__conn_os_handle(conn, &sock)
                  ? -EBUSY
                  : tcm__send_with_fds(sock, buf, len, fds, nfds);
    free(buf);
    return err;
}

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
        conn->heard_ns = tcm__now_ns();
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
            conn->srv->control_cbs->request(conn, req);
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
    if (conn->handle_closed) {
        free_conn(conn);
        return;
    }
    if (conn->held && !conn->closing) {
        conn->held = false;
        if (!conn->paused)
            uv_read_start((uv_stream_t *)&conn->pipe, on_alloc, on_read);
    }
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
    if (nread == UV_ENOBUFS && conn->waiting) { /* requests sent ahead of an answer: read on once it is sent */
        uv_read_stop(stream);
        conn->held = true;
        return;
    }
    if (nread < 0) {
        tcm__conn_close(conn);
        return;
    }
    conn->len += (size_t)nread;
    handle_frames(conn);
}

/* One connection past a cap: told why in one frame (without waiting for
 * it to be read) and closed, so refusing costs what accepting does. */
static void refuse_connection(tcm_conn_t *conn, const char *why)
{
    char msg[160];
    snprintf(msg, sizeof msg, "%s: try again later", why);
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
    tcm__log_peer(TCM_LOG_WARN, tcm__log_source_uid(conn->uid), "control: pid %d uid %u refused: %s", (int)conn->pid,
                  (unsigned)conn->uid, why);
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
    if (tcm__conn_os_handle(conn, &fd) != 0 ||
        tcm__peer_cred(fd, &conn->pid, &conn->uid, &conn->gid) != 0) {
        uv_close((uv_handle_t *)&conn->pipe, on_close);
        return;
    }
    /* the total, then the user's share; the operator has a reserve beyond both */
    uint32_t reserve = tcm__is_operator(conn->uid) ? TCM_CONTROL_OPERATOR_RESERVE : 0,
             mine = tcm__shares_of(&srv->conn_shares, conn->uid);
    char why[128];
    if (srv->control_conns > srv->control_max_conns + reserve) {
        snprintf(why, sizeof why, "tcmd has %u control connections open, its limit", srv->control_max_conns);
        refuse_connection(conn, why);
        return;
    }
    if (mine >= srv->conns_per_uid + reserve) {
        snprintf(why, sizeof why, "uid %u has %u control connections open, its share (conns_per_uid)",
                 (unsigned)conn->uid, mine);
        refuse_connection(conn, why);
        return;
    }
    tcm__shares_add(&srv->conn_shares, conn->uid);
    conn->listed = true;
    conn->heard_ns = tcm__now_ns();
    conn->prev = NULL;
    conn->next = srv->conns;
    if (conn->next)
        conn->next->prev = conn;
    srv->conns = conn;
    uv_read_start((uv_stream_t *)&conn->pipe, on_alloc, on_read);
}

/* Every second: close peers stuck on unread replies, and connections that
 * are no client's and have said nothing for conn_idle_s (an attached
 * client's is its link to tcmd, however quiet); end log windows. */
static void stall_check(tcm_server_t *srv, tcm_conn_t *conn)
{
    uint64_t now = tcm__now_ns(), since = conn->paused_ns > conn->drained_ns ? conn->paused_ns : conn->drained_ns;
    uint64_t idle_ns = srv->conn_idle_s * 1000000000ull;
    if (!conn->client && !conn->waiting && idle_ns && now - conn->heard_ns > idle_ns) {
        tcm__log_peer(TCM_LOG_INFO, tcm__log_source_uid(conn->uid),
                      "control: pid %d uid %u silent for %llu s (conn_idle_s): connection closed", (int)conn->pid,
                      (unsigned)conn->uid, (unsigned long long)srv->conn_idle_s);
        tcm__conn_close(conn);
        return;
    }
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
    for (tcm_conn_t *conn = srv->conns, *next; conn; conn = next) {
        next = conn->next;
        stall_check(srv, conn);
    }
    tcm__log_peer_tick();
}

void tcm__conns_close_all(tcm_server_t *srv)
{
    while (srv->conns) {
        tcm_conn_t *conn = srv->conns;
        if (conn->client) /* the daemon is going away; nothing to reclaim */
            conn->client->conn = NULL;
        conn->client = NULL;
        tcm__conn_close(conn); /* (unlinks it) */
    }
}

int tcm__transport_listen(tcm_server_t *srv, const tcm_transport_cbs_t *cbs)
{
    int err;
    srv->control_cbs = cbs;
    if ((err = tcm__shares_init(&srv->conn_shares, tcm__pow2_at_least(4 * srv->control_max_conns))) != 0)
        return err;
    uv_timer_init(srv->loop, &srv->conn_sweep);
    srv->conn_sweep.data = srv;
    uv_timer_start(&srv->conn_sweep, on_sweep, 1000, 1000);
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
