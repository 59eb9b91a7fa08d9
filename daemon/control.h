/* control.h — one control connection, between the transport (control.c)
 * and the handlers (handlers.c). Main thread only. */
#ifndef TCM_CONTROL_H
#define TCM_CONTROL_H

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
    uint64_t paused_ns;   /* when it was paused */
    uint64_t drained_ns;  /* when a reply last went out of its queue */
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

/* Access: changing anything is for tcmd's uid and root; attaching also for
 * --allow-group. Refusals are answered and logged here. */
bool tcm__conn_may_change(tcm_conn_t *conn, const char *what);
bool tcm__conn_may_attach(tcm_conn_t *conn);

/* handlers.c: one decoded request. */
void tcm__control_handle(tcm_conn_t *conn, const Tcm__Request *req);

#endif
