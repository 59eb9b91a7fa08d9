/* transport.h — one control connection and what the transport
 * (transport.c) offers the code that answers its requests: replies, errors,
 * waiting for the heap thread, closing. Main thread only. */
#ifndef TCM_TRANSPORT_H
#define TCM_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server.h"
#include "tcm.pb-c.h"

struct tcm_conn {
    uv_pipe_t pipe;
    tcm_server_t *srv;
    tcm_client_t *client; /* set after Hello */
    uint8_t *buf;         /* frames read, not yet handled */
    size_t len;
    tcm_pid_t pid;
    tcm_uid_t uid;
    tcm_gid_t gid;
    bool closing;         /* closed or closing: replies go nowhere */
    bool handle_closed;
    bool waiting;         /* a request is being answered later: the next frames wait */
    bool paused;          /* too many replies unread: not read, its frames wait (control.c) */
    bool held;            /* its frame buffer filled while it waited for an answer: not read until then */
    uint64_t paused_ns;   /* when it was paused */
    uint64_t drained_ns;  /* when a reply last went out of its queue */
    uint64_t heard_ns;    /* when it was accepted or last sent a request: an idle one is closed */
    bool listed;          /* in srv->conns and counted in srv->conn_shares: accepted, not yet closed */
    struct tcm_conn *next, *prev; /* srv->conns: the open ones (other pipes on the loop are not these) */
    struct tcm_conn *view_next;   /* waiting for a view with others (handlers.c) */
};

void tcm__conn_reply(tcm_conn_t *conn, Tcm__Response__BodyCase which, void *body);
/* Sent at once with descriptors (SCM_RIGHTS); 0 or -errno. */
int tcm__conn_reply_with_fds(tcm_conn_t *conn, Tcm__Response__BodyCase which, void *body, const tcm_handle_t *fds,
                             int nfds);
void tcm__conn_error(tcm_conn_t *conn, uint32_t code, const char *msg);
void tcm__conn_close(tcm_conn_t *conn);
/* A handler that answers later (after the heap thread): wait, then resume
 * once it has answered, so that replies keep the order of the requests and
 * the connection outlives the wait. */
void tcm__conn_wait(tcm_conn_t *conn);
void tcm__conn_resume(tcm_conn_t *conn);

/* A connection's OS handle, as the platform layer takes it (a descriptor,
 * or a pipe HANDLE's value on Windows). 0 or a libuv error. */
int tcm__conn_os_handle(tcm_conn_t *conn, tcm_handle_t *out);

/* What the transport calls: request with each decoded request of this
 * protocol version, in order; closed when a connection starts closing
 * (before its handle is released). */
typedef void (*tcm_request_cb)(tcm_conn_t *conn, const Tcm__Request *req);
typedef void (*tcm_conn_closed_cb)(tcm_conn_t *conn);
typedef struct tcm_transport_cbs {
    tcm_request_cb request;
    tcm_conn_closed_cb closed;
} tcm_transport_cbs_t;

/* Listen on srv->socket_path (owner-only, or shared with --allow-group)
 * and serve connections with cbs, which must outlive the loop; start the
 * sweep of peers stuck on unread replies. 0 or an error, logged. */
int tcm__transport_listen(tcm_server_t *srv, const tcm_transport_cbs_t *cbs);
/* Close every control connection (tcmd is going away). */
void tcm__conns_close_all(tcm_server_t *srv);

#endif
