/* access.c — who may do what on the control socket: changing anything is
 * for tcmd's uid and root, attaching also for --allow-group, reading for
 * anyone the socket lets in. Refusals are answered and logged here. Main
 * thread only. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "access.h"
#include "log.h"
#include "prim.h"
#include "server.h"
#include "transport.h"

static bool refuse_access(tcm_conn_t *conn, const char *what);

/* Requests that change anything, and attaching (the segments are the
 * daemon user's), are for the daemon's own uid and root; anyone the socket
 * lets in may read. */
bool tcm__conn_may_change(tcm_conn_t *conn, const char *what)
{
    if (tcm__is_operator(conn->uid))
        return true;
    return refuse_access(conn, what);
}

/* Attaching is also for the members of --allow-group: the segments reach
 * them as descriptors, the metadata read-only. */
bool tcm__conn_may_attach(tcm_conn_t *conn)
{
    tcm_server_t *srv = conn->srv;
    tcm_handle_t fd;
    if (tcm__is_operator(conn->uid) ||
        (srv->allow_group_set && tcm__conn_os_handle(conn, &fd) == 0 &&
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

